// ddp: PyTorch DistributedDataParallel. When the largest band's codec has a PyTorch built-in hook
// (none, fp16, bf16, powersgd), PyTorch's own hook stays, with ciuic's per-band hook (the ciuic
// runtime on CPU or CUDA buckets) as a commented alternative when the bands differ. Otherwise python/ciuic's comm hook
// is the export: it applies each band's rule per bucket.
#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/codec_spec.h"
#include "tuner/exports/consumer.h"

namespace ciuic::exports {

namespace {

bool HasBuiltinHook(CodecKind k) {
  return k == CodecKind::kNone || k == CodecKind::kFp16 || k == CodecKind::kBf16 || k == CodecKind::kPowerSgd;
}

std::string Quoted(const std::string& s) { return nlohmann::json(s).dump(); }

// PyTorch's own hook for the largest band's choice (its bucket cap, its codec).
std::string BuiltinBody(const Profile& p, const std::string& head) {
  const ProfileRule& big = LargestBand(p);
  const CodecSpec codec = ParseCodec(big.codec);
  std::string out = "# " + head + "\n";
  out += "from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook\n";
  out += "from torch.nn.parallel import DistributedDataParallel as DDP\n\n";
  out += fmt::format("model = DDP(model, bucket_cap_mb={})\n", std::max<uint64_t>(1, big.bucket_bytes >> 20));
  const char* bf16_note =
      "# bf16_compress_hook: PyTorch requires CUDA 11+ and NCCL 2.10+ for it (refused on CPU/gloo)\n";
  if (big.precision == "fp16") {  // the hook is exactly this: ÷ world size, cast, NCCL fp16 allreduce, cast back
    out += "model.register_comm_hook(None, default_hooks.fp16_compress_hook)\n";
  } else if (big.precision == "bf16") {
    out += bf16_note;
    out += "model.register_comm_hook(None, default_hooks.bf16_compress_hook)\n";
  } else {
    if (codec.kind == CodecKind::kFp16 || codec.kind == CodecKind::kBf16)
      out += fmt::format(
          "# closest built-in to codec {}: the hook sums in {} inside NCCL where the ciuic ring "
          "accumulates each hop in fp32\n",
          big.codec, big.codec);
    switch (codec.kind) {
      case CodecKind::kFp16:
        out += "model.register_comm_hook(None, default_hooks.fp16_compress_hook)\n";
        break;
      case CodecKind::kBf16:
        out += bf16_note;
        out += "model.register_comm_hook(None, default_hooks.bf16_compress_hook)\n";
        break;
      case CodecKind::kPowerSgd:
        out += fmt::format(
            "state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank={}, "
            "start_powerSGD_iter=10, use_error_feedback=True, warm_start=True)\n"
            "model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)\n",
            codec.rank);
        break;
      case CodecKind::kNone:
        out += "# uncompressed allreduce: DDP's default hook\n";
        break;
      default:
        out += fmt::format(
            "# codec {} has no PyTorch built-in hook: the uncompressed default stays; "
            "the ciuic runtime (C API) applies it\n",
            big.codec);
    }
  }
  bool uniform = true;
  for (const auto& r : p.rules)
    uniform = uniform && r.algo == big.algo && r.codec == big.codec && r.precision == big.precision;
  if (!uniform) {
    const std::string path = Quoted(ProfilePathForExport(p));
    out +=
        "# Every size band per bucket instead (the ciuic runtime: CPU buckets over gloo, CUDA buckets over NCCL):\n"
        "#   import ciuic.torch  # PYTHONPATH=<ciuic>/python\n"
        "#   model = DDP(module, **ciuic.torch.ddp_kwargs(" +
        path +
        "))\n"
        "#   state, hook = ciuic.torch.comm_hook(" +
        path +
        ", module=module)\n"
        "#   model.register_comm_hook(state, hook)\n";
  }
  return out;
}

std::vector<std::string> BuiltinLost(const Profile& p) {
  const ProfileRule& big = LargestBand(p);
  const std::string band = BandName(big);
  std::vector<std::string> out;
  if (!HasBuiltinHook(ParseCodec(big.codec).kind))
    out.push_back(
        fmt::format("{}: codec {}: PyTorch has no built-in hook for it (python/ciuic's comm_hook runs "
                    "it: ciuic.torch.comm_hook(profile))",
                    band, big.codec));
  if (big.algo == "rd" || big.algo == "hier")
    out.push_back(fmt::format("{}: algorithm {}: DDP's process group runs its own allreduce", band, big.algo));
  return out;
}

// Every band per bucket, through python/ciuic on libciuic (ctypes).
std::string CiuicHookBody(const Profile& p, const std::string& head) {
  const ProfileRule& big = LargestBand(p);
  std::string out = "# " + head + "\n";
  out +=
      "# Every size band of the profile, per DDP bucket, with ciuic's codecs: python/ciuic on libciuic\n"
      "# (PYTHONPATH=<ciuic>/python; CIUIC_LIBRARY=<ciuic>/build/lib/libciuic.so). The ciuic runtime reduces\n"
      "# every bucket on its own thread (CPU buckets over gloo, CUDA buckets over NCCL, meeting through the\n"
      "# job's torch.distributed store); the profile must be tuned for this job's world. Save\n"
      "# state.state_dict() with each rank's checkpoint and load it back after register_comm_hook to resume\n"
      "# bit for bit.\n";
  out += "import ciuic.torch\n";
  out += "from torch.nn.parallel import DistributedDataParallel as DDP\n\n";
  out += "CIUIC_PROFILE = " + Quoted(ProfilePathForExport(p)) + "\n";
  out += "_ciuic_module = model\n";
  out += fmt::format("model = DDP(model, **ciuic.torch.ddp_kwargs(CIUIC_PROFILE))  # bucket_cap_mb={}\n",
                     static_cast<double>(big.bucket_bytes) / (1 << 20));
  out += "state, hook = ciuic.torch.comm_hook(CIUIC_PROFILE, module=_ciuic_module)\n";
  out += "model.register_comm_hook(state, hook)\n";
  for (const auto& r : p.rules)
    out += fmt::format("#   {} {} codec {} in {}, pieces of {} B\n", BandName(r), r.algo, r.codec, r.precision,
                       r.bucket_bytes);
  return out;
}

// The hook applies every band's rule; only recursive doubling is the process group's to run.
std::vector<std::string> CiuicHookLost(const Profile& p) {
  std::vector<std::string> out;
  for (const auto& r : p.rules)
    if (r.codec == "none" && r.algo == "rd")
      out.push_back(fmt::format("{}: algorithm rd: DDP's process group runs its own allreduce", BandName(r)));
  return out;
}

// The accumulation suggestion, as comments: the job opts in (it changes the effective batch).
std::string WithAccumulation(const Profile& p, std::string body) {
  const std::string what = AccumulationSuggestion(p);
  if (what.empty()) return body;
  const int k = p.accumulation.steps;
  body += fmt::format(
      "# Suggestion, not applied (a training hyperparameter: the effective batch grows {0}-fold; keep or retune your\n"
      "# learning rate): {1}.\n"
      "# To opt in, sync every {0} micro-batches with DDP's no_sync through ciuic.torch:\n"
      "#   acc = ciuic.torch.Accumulation(model, {0})\n"
      "#   for i, batch in enumerate(loader):\n"
      "#       with acc.micro_batch(i):\n"
      "#           (loss_fn(model(batch)) / {0}).backward()\n"
      "#       if acc.sync_step(i):\n"
      "#           optimizer.step(); optimizer.zero_grad()\n",
      k, what);
  return body;
}

}  // namespace

Consumer DdpConsumer(const Profile& p) {
  const bool ciuic_hook = !p.rules.empty() && !HasBuiltinHook(ParseCodec(LargestBand(p).codec).kind);
  auto body = [ciuic_hook](const Profile& q, const std::string& head) {
    return WithAccumulation(q, ciuic_hook ? CiuicHookBody(q, head) : BuiltinBody(q, head));
  };
  if (ciuic_hook) return {"ddp", body, CiuicHookLost, false};
  return {"ddp", body, BuiltinLost, true};
}

}  // namespace ciuic::exports
