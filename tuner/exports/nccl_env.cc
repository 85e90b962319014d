// nccl-env: NCCL's own environment variables for the uncompressed path: the algorithm the model
// prefers for large messages, the Simple protocol once buckets are bandwidth-bound, and buffers and
// CTAs sized to the largest band's bucket and streams.
#include <algorithm>

#include <fmt/format.h>

#include "kernels/codec_spec.h"
#include "tuner/exports/consumer.h"

namespace ciuic::exports {

namespace {

std::string Body(const Profile& p, const std::string& head) {
  const ProfileRule& big = LargestBand(p);
  std::string out = "# " + head + "\n";
  const bool tree = big.algo == "rd";
  out += fmt::format("export NCCL_ALGO={}\n", tree ? "Tree" : "Ring");
  if (big.bucket_bytes >= (16u << 20)) out += "export NCCL_PROTO=Simple  # buckets >= 16 MiB are bandwidth-bound\n";
  out += fmt::format("export NCCL_BUFFSIZE={}\n", big.bucket_bytes >= (64u << 20) ? (8u << 20) : (4u << 20));
  const int ctas = std::max(2, std::min(32, big.streams * 2));
  out += fmt::format("export NCCL_MIN_CTAS={}\nexport NCCL_MAX_CTAS={}\n", ctas, std::max(ctas, 16));
  if (big.precision != "fp32")
    out += fmt::format("# the profile reduces gradients in {}: NCCL has no variable for that; the framework casts "
                       "(ciuic-tune export --format ddp | deepspeed)\n",
                       big.precision);
  return out;
}

std::vector<std::string> Lost(const Profile& p) {
  const ProfileRule& big = LargestBand(p);
  const std::string band = BandName(big);
  std::vector<std::string> out;
  if (ParseCodec(big.codec).kind != CodecKind::kNone)
    out.push_back(fmt::format("{}: codec {}: NCCL cannot compress (the ciuic runtime or its DDP hook runs it)", band,
                              big.codec));
  if (big.precision != "fp32")
    out.push_back(fmt::format("{}: reduction in {}: NCCL has no variable for it (the framework casts)", band,
                              big.precision));
  if (big.algo != "nccl" && big.algo != "ring" && big.algo != "rd")
    out.push_back(fmt::format("{}: algorithm {} is ciuic's; NCCL_ALGO=Ring stands in", band, big.algo));
  return out;
}

}  // namespace

Consumer NcclEnvConsumer() { return {"nccl-env", Body, Lost, true}; }

}  // namespace ciuic::exports
