// nccl-env: NCCL's own environment variables, for choices the profile made on NCCL's own axis only.
// NCCL_ALGO, NCCL_PROTO, the CTA and thread counts and NCCL_BUFFSIZE act on every collective at every
// size: a global value switches off NVLS, Tree, CollNet and PAT wherever the profile never measured
// them. A profile keeps NCCL's own choice in a band ("nccl" codec none in fp32) or asks for something
// NCCL cannot run (a codec, a 16-bit reduction, ciuic's ring/rd/hier); it carries no measured
// algorithm/protocol/channel choice of NCCL's, so this export sets nothing, says so per band, and
// lists what NCCL cannot express. Per-size steering of NCCL is the tuner plugin's (--format nccl-tuner).
#include <fmt/format.h>

#include "kernels/codec_spec.h"
#include "tuner/exports/consumer.h"

namespace ciuic::exports {

namespace {

bool NcclsOwn(const ProfileRule& r) {
  return r.algo == "nccl" && ParseCodec(r.codec).kind == CodecKind::kNone && r.precision == "fp32";
}

std::string Body(const Profile& p, const std::string& head) {
  std::string out = "# " + head + "\n";
  out += "# NCCL_ALGO, NCCL_PROTO, NCCL_MIN_CTAS/NCCL_MAX_CTAS, NCCL_NTHREADS and NCCL_BUFFSIZE are left to NCCL:\n"
         "# they act on every collective at every size, and this profile holds no measured choice on NCCL's\n"
         "# algorithm, protocol or channel axis to set them from.\n";
  for (const auto& r : p.rules)
    out += fmt::format("#   {}: {} codec {} in {}: {}\n", BandName(r), r.algo, r.codec, r.precision,
                       NcclsOwn(r) ? "NCCL's own allreduce, left alone" : "not NCCL's to run (listed below)");
  out += fmt::format("# per message size: the tuner plugin (ciuic-tune export --profile {} --format nccl-tuner)\n",
                     ProfilePathForExport(p));
  return out;
}

std::vector<std::string> Lost(const Profile& p) {
  std::vector<std::string> out;
  for (const auto& r : p.rules) {
    const std::string band = BandName(r);
    if (ParseCodec(r.codec).kind != CodecKind::kNone)
      out.push_back(fmt::format("{}: codec {}: NCCL cannot compress (the ciuic runtime or its DDP hook runs it)", band,
                                r.codec));
    if (r.precision != "fp32")
      out.push_back(fmt::format("{}: reduction in {}: NCCL has no variable for it (the framework casts)", band,
                                r.precision));
    if (r.algo != "nccl")
      out.push_back(fmt::format("{}: algorithm {} is ciuic's runtime, not an NCCL algorithm", band, r.algo));
  }
  return out;
}

}  // namespace

Consumer NcclEnvConsumer() { return {"nccl-env", Body, Lost, false}; }

}  // namespace ciuic::exports
