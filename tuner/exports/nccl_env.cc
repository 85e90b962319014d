// nccl-env: NCCL's own environment variables, for choices the profile measured on NCCL's own axis
// only. NCCL_ALGO, NCCL_PROTO and the CTA counts act on every collective at every size: a global value
// switches off NVLS, Tree, CollNet and PAT wherever the profile never measured them. So a variable is
// written only when every allreduce band of the profile measured the same value for it with NCCL
// (ciuic-tune --mode measure --transport nccl); a band that keeps NCCL's own choice, asks for
// something NCCL cannot run (a codec, a 16-bit reduction, ciuic's ring/rd/hier), or holds only the
// cost model's advice blocks it. Choices that differ per size are listed as lost: per-size steering
// is the tuner plugin's (--format nccl-tuner).
#include <fmt/format.h>

#include "core/sizes.h"
#include "kernels/codec_spec.h"
#include "tuner/exports/consumer.h"

namespace ciuic::exports {

namespace {

bool NcclsOwn(const ProfileRule& r) {
  return r.algo == "nccl" && ParseCodec(r.codec).kind == CodecKind::kNone && r.precision == "fp32";
}

// The value every allreduce band measured for one setting (`get` of its NcclSettings), or "" when a band
// measured none, another value, or nothing at all.
template <class Get>
std::string Common(const Profile& p, Get get) {
  std::string value;
  for (const auto& r : p.rules) {
    const NcclTunerChoice c = NcclTunerChoiceFor(r);
    const std::string v = c.apply ? get(c.choice) : "";
    if (v.empty() || (!value.empty() && v != value)) return "";
    value = v;
  }
  return value;
}

struct EnvVars {
  std::string algo, proto, channels;
};
EnvVars Settable(const Profile& p) {
  return {Common(p, [](const NcclSettings& c) { return c.algo.empty() ? "" : NcclAlgoEnvName(c.algo); }),
          Common(p, [](const NcclSettings& c) { return c.proto.empty() ? "" : NcclProtoEnvName(c.proto); }),
          Common(p, [](const NcclSettings& c) { return c.channels ? std::to_string(c.channels) : ""; })};
}

std::string NcclEnvBody(const Profile& p, const std::string& head) {
  std::string out = "# " + head + "\n";
  const EnvVars v = Settable(p);
  if (v.algo.empty() && v.proto.empty() && v.channels.empty()) {
    out +=
        "# NCCL_ALGO, NCCL_PROTO, NCCL_MIN_CTAS/NCCL_MAX_CTAS, NCCL_NTHREADS and NCCL_BUFFSIZE are left to NCCL:\n"
        "# they act on every collective at every size, and no setting was measured with NCCL in every band.\n";
  } else {
    out +=
        "# Measured with NCCL in every allreduce band of the profile. These variables act on every collective\n"
        "# (allgather, reducescatter, broadcast too), which the profile did not time: prefer the tuner plugin.\n";
    if (!v.algo.empty()) out += "export NCCL_ALGO=" + v.algo + "\n";
    if (!v.proto.empty()) out += "export NCCL_PROTO=" + v.proto + "\n";
    if (!v.channels.empty())
      out += "export NCCL_MIN_CTAS=" + v.channels + "\nexport NCCL_MAX_CTAS=" + v.channels + "\n";
  }
  for (const auto& r : p.rules) {
    const NcclTunerChoice c = NcclTunerChoiceFor(r);
    out += fmt::format("#   {}: {} codec {} in {}: {}\n", BandName(r), r.algo, r.codec, r.precision,
                       c.apply ? "NCCL " + DescribeNcclSettings(c.choice) + ", " + c.why
                       : NcclsOwn(r)
                           ? "NCCL's own allreduce, left alone" + std::string(r.nccl.Empty() ? "" : " (" + c.why + ")")
                           : "not NCCL's to run (listed below)");
  }
  out += fmt::format("# per message size: the tuner plugin (ciuic-tune export --profile {} --format nccl-tuner)\n",
                     ProfilePathForExport(p));
  return out;
}

std::vector<std::string> NcclEnvLost(const Profile& p) {
  std::vector<std::string> out;
  const EnvVars v = Settable(p);
  for (const auto& r : p.rules) {
    const std::string band = BandName(r);
    if (ParseCodec(r.codec).kind != CodecKind::kNone)
      out.push_back(
          fmt::format("{}: codec {}: NCCL cannot compress (the ciuic runtime or its DDP hook runs it)", band, r.codec));
    if (r.precision != "fp32")
      out.push_back(
          fmt::format("{}: reduction in {}: NCCL has no variable for it (the framework casts)", band, r.precision));
    if (r.algo != "nccl")
      out.push_back(fmt::format("{}: algorithm {} is ciuic's runtime, not an NCCL algorithm", band, r.algo));
    const NcclTunerChoice c = NcclTunerChoiceFor(r);
    if (!c.apply) continue;
    std::vector<std::string> per_size;
    if (!c.choice.algo.empty() && v.algo.empty()) per_size.push_back("algorithm " + c.choice.algo);
    if (!c.choice.proto.empty() && v.proto.empty()) per_size.push_back("protocol " + c.choice.proto);
    if (c.choice.channels && v.channels.empty()) per_size.push_back(fmt::format("{} channels", c.choice.channels));
    if (c.choice.chunk_bytes) per_size.push_back("chunk " + FormatSize(c.choice.chunk_bytes));
    if (!per_size.empty())
      out.push_back(
          fmt::format("{}: measured NCCL {}: not the same in every band, or no variable sets it per size "
                      "(the tuner plugin applies it)",
                      band, fmt::join(per_size, ", ")));
  }
  for (const CommunicatorRules& cr : p.communicators)
    out.push_back(
        fmt::format("rules for communicators of {} ranks on {} node(s): environment variables cannot tell "
                    "communicators apart (the tuner plugin applies them)",
                    cr.ranks, cr.nodes));
  return out;
}

}  // namespace

Consumer NcclEnvConsumer() { return {"nccl-env", NcclEnvBody, NcclEnvLost, false}; }

}  // namespace ciuic::exports
