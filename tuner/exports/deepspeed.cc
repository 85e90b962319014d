// deepspeed: keys to merge into a DeepSpeed config, only for what the profile chose. The bucket sizes
// go in elements of the job's gradient dtype (--grad-dtype, default bf16), under zero_optimization
// (stages 1-3 read them; the job's own stage stays). communication_data_type is written only where
// the profile reduces in a 16-bit type other than the job's (DeepSpeed's default follows the job's
// fp16/bf16 mode). Never an optimizer or a ZeRO stage: a codec whose nearest DeepSpeed feature
// needs one (int4: ZeRO++'s quantized gradients at stage 3; sign1: 1-bit Adam, replacing Adam, at
// stage 0) is a suggestion in "_ciuic_suggest" with its reason and the profile's gain, and is listed
// as not expressed.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kernels/codec_spec.h"
#include "tuner/exports/consumer.h"

namespace ciuic::exports {

namespace {

std::string GradDtype(const ExportOptions& o) { return o.grad_dtype.empty() ? "bf16" : o.grad_dtype; }

// The 16-bit type the profile reduces the largest band in ("" for none): its precision, or the
// 16-bit codec's type.
std::string ReducedType(const ProfileRule& big) {
  const CodecKind k = ParseCodec(big.codec).kind;
  if (big.precision != "fp32") return big.precision;
  if (k == CodecKind::kFp16) return "fp16";
  if (k == CodecKind::kBf16) return "bf16";
  return "";
}

// What the profile's choice gains in the largest band, as it was found (measured, else modelled).
std::string Gain(const Profile& p, const ProfileRule& big) {
  if (big.measured_us > 0 && big.baseline_us > 0)
    return fmt::format("measured {:.1f} us against the library's {:.1f} us at the band's size ({:.2f}x)",
                       big.measured_us, big.baseline_us, big.baseline_us / big.measured_us);
  if (p.step_us > 0 && p.baseline_step_us > 0)
    return fmt::format("modelled: a step of {:.1f} ms against {:.1f} ms with NCCL's defaults ({:.2f}x), not measured",
                       p.step_us / 1000, p.baseline_step_us / 1000, p.baseline_step_us / p.step_us);
  return "not measured";
}

std::string DeepSpeedBody(const Profile& p, const std::string& head, const ExportOptions& o) {
  const ProfileRule& big = LargestBand(p);
  const CodecKind k = ParseCodec(big.codec).kind;
  const std::string grad = GradDtype(o);
  const uint64_t elements = big.bucket_bytes / (grad == "fp32" ? 4 : 2);
  nlohmann::json j;
  j["zero_optimization"] = {{"reduce_bucket_size", elements}, {"allgather_bucket_size", elements}};
  const std::string reduced = ReducedType(big);
  if (!reduced.empty() && reduced != grad) j["communication_data_type"] = reduced;
  nlohmann::json suggest = nlohmann::json::array();
  if (k == CodecKind::kInt4)
    suggest.push_back({{"what", "zero_optimization.zero_quantized_gradients: true (needs ZeRO stage 3)"},
                       {"why",
                        "the profile chose int4 for the largest band; ZeRO++'s 4-bit gradients are the nearest "
                        "DeepSpeed has (all-to-all reduce-scatter, no error feedback)"},
                       {"gain", Gain(p, big)}});
  if (k == CodecKind::kSign1)
    suggest.push_back({{"what", "optimizer OneBitAdam (replaces Adam; runs at ZeRO stage 0)"},
                       {"why",
                        "the profile chose sign1 with error feedback for the largest band; 1-bit Adam is "
                        "DeepSpeed's nearest, and it changes the optimizer"},
                       {"gain", Gain(p, big)}});
  if (const std::string what = AccumulationSuggestion(p); !what.empty())
    suggest.push_back({{"what", fmt::format("gradient_accumulation_steps: {} (train_batch_size grows {}-fold; keep "
                                            "train_micro_batch_size_per_gpu)",
                                            p.accumulation.steps, p.accumulation.steps)},
                       {"why",
                        "DeepSpeed reduces gradients once per accumulation boundary: fewer synchronisations per "
                        "sample. It changes the effective batch, a training hyperparameter: not set here"},
                       {"gain", what},
                       {"gate", "passed"}});
  if (!suggest.empty()) j["_ciuic_suggest"] = suggest;
  j["_ciuic"] = head;
  j["_ciuic_merge"] = fmt::format(
      "merge into your DeepSpeed config key by key: these keys replace yours, the rest of yours stays (your ZeRO stage "
      "and optimizer included). Bucket sizes are in elements of {} gradients ({} B buckets); ZeRO stages 1-3 read "
      "them. communication_data_type is {}.",
      grad, big.bucket_bytes,
      reduced.empty()   ? "left to DeepSpeed (the profile reduces at the gradients' own width)"
      : reduced == grad ? fmt::format("left to DeepSpeed ({} already, as the profile chose)", grad)
                        : fmt::format("{}, the profile's reduction", reduced));
  return j.dump(2) + "\n";
}

std::vector<std::string> DeepSpeedLost(const Profile& p) {
  const ProfileRule& big = LargestBand(p);
  const CodecKind k = ParseCodec(big.codec).kind;
  const std::string band = BandName(big);
  std::vector<std::string> out;
  if (k == CodecKind::kInt4 || k == CodecKind::kSign1)
    out.push_back(
        fmt::format("{}: codec {}: DeepSpeed's nearest changes the ZeRO stage or the optimizer, which an "
                    "export does not: see _ciuic_suggest",
                    band, big.codec));
  else if (k != CodecKind::kNone && k != CodecKind::kFp16 && k != CodecKind::kBf16)
    out.push_back(fmt::format("{}: codec {}: DeepSpeed has no such gradient compression", band, big.codec));
  if (big.algo == "rd" || big.algo == "hier" || big.algo == "sparse" || big.algo == "powersgd")
    out.push_back(fmt::format("{}: algorithm {}: DeepSpeed's allreduce is NCCL's", band, big.algo));
  return out;
}

}  // namespace

Consumer DeepSpeedConsumer(const ExportOptions& o) {
  if (!o.grad_dtype.empty() && o.grad_dtype != "fp32" && o.grad_dtype != "fp16" && o.grad_dtype != "bf16")
    throw UsageError(fmt::format("--grad-dtype {}: fp32, fp16 or bf16", o.grad_dtype));
  return {"deepspeed", [o](const Profile& p, const std::string& head) { return DeepSpeedBody(p, head, o); },
          DeepSpeedLost, true};
}

}  // namespace ciuic::exports
