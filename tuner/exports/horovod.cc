// horovod: Horovod's environment (fusion threshold = the largest band's bucket, hierarchical
// allreduce for depth > 1) and its compression, fp16 only. No cycle time: no study times Horovod's
// fusion cycle, so its 1 ms default stays.
#include <algorithm>

#include <fmt/format.h>

#include "kernels/codec_spec.h"
#include "tuner/exports/consumer.h"

namespace ciuic::exports {

namespace {

std::string HorovodBody(const Profile& p, const std::string& head) {
  const ProfileRule& big = LargestBand(p);
  const CodecKind k = ParseCodec(big.codec).kind;
  std::string out = "# " + head + "\n";
  out += fmt::format("export HOROVOD_FUSION_THRESHOLD={}\n", big.bucket_bytes);
  out += "# HOROVOD_CYCLE_TIME is left to Horovod (no study timed it)\n";
  out += fmt::format("export HOROVOD_HIERARCHICAL_ALLREDUCE={}\n", big.hierarchy_depth > 1 ? 1 : 0);
  if (big.precision == "fp16" || k == CodecKind::kFp16)
    out += "# in the training script: hvd.DistributedOptimizer(opt, compression=hvd.Compression.fp16)\n";
  else if (big.precision == "bf16" || k == CodecKind::kBf16)
    out += "# bf16: Horovod's built-in compression has fp16 only (the profile chose bf16): compression stays none\n";
  else if (k != CodecKind::kNone)
    out += fmt::format("# codec {} has no Horovod built-in: compression stays none\n", big.codec);
  return out;
}

std::vector<std::string> HorovodLost(const Profile& p) {
  const ProfileRule& big = LargestBand(p);
  const CodecKind k = ParseCodec(big.codec).kind;
  const std::string band = BandName(big);
  std::vector<std::string> out;
  if (big.precision == "bf16" || k == CodecKind::kBf16)
    out.push_back(fmt::format("{}: bf16: Horovod's built-in compression has fp16 only", band));
  else if (k != CodecKind::kNone && k != CodecKind::kFp16)
    out.push_back(fmt::format("{}: codec {}: Horovod has no such compression", band, big.codec));
  if (big.algo != "nccl" && big.algo != "ring" && big.algo != "rd" && big.algo != "hier")
    out.push_back(fmt::format("{}: algorithm {} is ciuic's; Horovod runs its own allreduce", band, big.algo));
  return out;
}

}  // namespace

Consumer HorovodConsumer() { return {"horovod", HorovodBody, HorovodLost, true}; }

}  // namespace ciuic::exports
