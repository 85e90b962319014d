// deepspeed: keys to merge into a DeepSpeed config. The bucket sizes (in elements) apply in ZeRO
// stages 1-3 (stage 3 reads reduce_bucket_size only): stage 1 is the lowest that applies them. int4
// maps to ZeRO++'s 4-bit quantized gradients, which need stage 3; 1-bit Adam (sign1) does not run
// under ZeRO: stage 0, where the bucket keys do nothing.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/codec_spec.h"
#include "tuner/exports/consumer.h"

namespace ciuic::exports {

namespace {

std::string Body(const Profile& p, const std::string& head) {
  const ProfileRule& big = LargestBand(p);
  const CodecSpec codec = ParseCodec(big.codec);
  nlohmann::json j;
  const int stage = codec.kind == CodecKind::kInt4 ? 3 : codec.kind == CodecKind::kSign1 ? 0 : 1;
  j["zero_optimization"] = {{"stage", stage}};
  if (stage > 0) j["zero_optimization"]["reduce_bucket_size"] = big.bucket_bytes / 4;
  if (stage > 0 && stage < 3) j["zero_optimization"]["allgather_bucket_size"] = big.bucket_bytes / 4;
  if (codec.kind == CodecKind::kInt4) j["zero_optimization"]["zero_quantized_gradients"] = true;
  // The reduction precision; a 16-bit codec's nearest equivalent is reducing in that type.
  j["communication_data_type"] = big.precision != "fp32"           ? big.precision
                                 : codec.kind == CodecKind::kFp16 ? "fp16"
                                 : codec.kind == CodecKind::kBf16 ? "bf16"
                                                                  : "fp32";
  if (codec.kind == CodecKind::kSign1) {
    j["optimizer"] = {{"type", "OneBitAdam"},
                      {"params", {{"lr", 1e-4}, {"freeze_step", 1000}, {"cuda_aware", false}, {"comm_backend_name", "nccl"}}}};
  }
  j["_ciuic"] = head;
  j["_ciuic_merge"] = fmt::format(
      "merge into your DeepSpeed config key by key: these keys replace yours, the rest of yours stays. Keep your "
      "own zero_optimization.stage if it is {} (the bucket sizes apply in stages 1-3; stage 3 reads "
      "reduce_bucket_size only); at stage 0 they do nothing.{}",
      stage == 3 ? "3 (zero_quantized_gradients needs it)" : stage == 0 ? "0 (1-bit Adam does not run under ZeRO)"
                                                                        : "1, 2 or 3",
      codec.kind == CodecKind::kSign1 ? " The optimizer block replaces yours: 1-bit Adam stands for Adam." : "");
  return j.dump(2) + "\n";
}

std::vector<std::string> Lost(const Profile& p) {
  const ProfileRule& big = LargestBand(p);
  const CodecKind k = ParseCodec(big.codec).kind;
  const std::string band = BandName(big);
  std::vector<std::string> out;
  if (k == CodecKind::kInt4)
    out.push_back(fmt::format("{}: codec int4: the nearest is ZeRO++'s zero_quantized_gradients (4-bit blocks, "
                              "reduce-scatter by all-to-all, ZeRO stage 3), not ciuic's ring with error feedback",
                              band));
  else if (k == CodecKind::kSign1)
    out.push_back(fmt::format("{}: codec sign1 as 1-bit Adam: it replaces Adam only and runs at ZeRO stage 0, "
                              "where the bucket size ({} B) is not DeepSpeed's to set",
                              band, big.bucket_bytes));
  else if (k != CodecKind::kNone && k != CodecKind::kFp16 && k != CodecKind::kBf16)
    out.push_back(fmt::format("{}: codec {}: DeepSpeed has no such gradient compression", band, big.codec));
  if (big.algo == "rd" || big.algo == "hier" || big.algo == "sparse" || big.algo == "powersgd")
    out.push_back(fmt::format("{}: algorithm {}: DeepSpeed's allreduce is NCCL's", band, big.algo));
  return out;
}

}  // namespace

Consumer DeepSpeedConsumer() { return {"deepspeed", Body, Lost, true}; }

}  // namespace ciuic::exports
