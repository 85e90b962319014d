#include "tuner/exports/exports.h"

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/sizes.h"
#include "kernels/codec_spec.h"
#include "tuner/exports/consumer.h"

namespace ciuic {

namespace exports {

std::string BandName(const ProfileRule& r) {
  return fmt::format("band [{}, {})", FormatSize(r.min_bytes), r.max_bytes ? FormatSize(r.max_bytes) : "inf");
}

std::string ProfilePathForExport(const Profile& p) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path profile = p.path.empty() ? fs::path("PROFILE.json") : fs::absolute(p.path, ec);
  if (ec) profile = p.path;
  return profile.lexically_normal().string();
}

const ProfileRule& LargestBand(const Profile& p) { return p.rules.back(); }

std::string AccumulationSuggestion(const Profile& p) {
  const AccumulationAdvice& a = p.accumulation;
  if (a.Empty() || a.steps == 1) return "";
  return fmt::format("sync every {} micro-batches: {:.2f}x per micro-batch ({}{}), accuracy gate passed on {} at {}",
                     a.steps, a.Gain(), a.priced == "measured" ? "priced from measured bucket times" : "modelled",
                     ", not yet timed in a training job", a.codec, a.steps);
}

}  // namespace exports

namespace {

exports::Consumer ConsumerFor(const Profile& p, const std::string& format, const ExportOptions& o) {
  using namespace exports;
  if (format == "json") return JsonConsumer();
  if (format == "nccl-env") return NcclEnvConsumer();
  if (format == "nccl-tuner") return NcclTunerConsumer();
  if (format == "ddp") return DdpConsumer(p);
  if (format == "deepspeed") return DeepSpeedConsumer(o);
  if (format == "horovod") return HorovodConsumer();
  std::string known;
  for (const auto& f : ExportFormats()) known += (known.empty() ? "" : " ") + f;
  throw UsageError(fmt::format("unknown export format '{}' ({})", format, known));
}

}  // namespace

std::vector<std::string> ExportFormats() { return {"json", "nccl-env", "nccl-tuner", "ddp", "deepspeed", "horovod"}; }

std::vector<std::string> UnexpressedChoices(const Profile& p, const std::string& format, const ExportOptions& o) {
  const exports::Consumer c = ConsumerFor(p, format, o);
  std::vector<std::string> out;
  if (p.rules.empty()) return out;
  const ProfileRule& big = exports::LargestBand(p);
  if (c.global_settings) {
    // One setting for every size: each band whose choice differs from the largest band's is lost.
    for (const auto& r : p.rules) {
      if (&r == &big || (r.algo == big.algo && r.codec == big.codec && r.precision == big.precision)) continue;
      out.push_back(
          fmt::format("{}: {} codec {} in {}: {} settings are global; the largest band's choice ({} codec {} "
                      "in {}) applies to every size",
                      exports::BandName(r), r.algo, r.codec, r.precision, format, big.algo, big.codec, big.precision));
    }
  }
  for (auto& l : c.lost(p)) out.push_back(std::move(l));
  if (c.global_settings && !out.empty() && ParseCodec(big.codec).kind != CodecKind::kNone)
    out.push_back(
        fmt::format("{}: the bucket size was tuned with codec {}: ciuic-tune run "
                    "--target {} tunes them for what {} can run",
                    exports::BandName(big), big.codec, format == "nccl-env" ? "nccl" : format, format));
  return out;
}

std::string ExportProfile(const Profile& p, const std::string& format, const ExportOptions& o) {
  const exports::Consumer c = ConsumerFor(p, format, o);
  if (p.rules.empty()) throw InputError("the profile has no rules to export");
  const std::string head = fmt::format("ciuic-tune export {}: topology {} ({}), workload {}, study {}, {} mode", format,
                                       p.topology, p.fingerprint, p.workload, p.study_id, p.mode);
  std::string body = c.body(p, head);
  const std::vector<std::string> lost = UnexpressedChoices(p, format, o);
  if (lost.empty()) return body;
  if (format == "deepspeed") {
    nlohmann::json j = nlohmann::json::parse(body);
    j["_ciuic_not_expressed"] = lost;
    return j.dump(2) + "\n";
  }
  body += fmt::format("# not expressed by {} ({} choice(s) of the profile; ciuic-tune export --strict refuses):\n",
                      format, lost.size());
  for (const auto& l : lost) body += "#   " + l + "\n";
  return body;
}

}  // namespace ciuic
