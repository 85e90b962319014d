#include "tuner/bench_runner.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/error.h"

namespace ciuic {

std::string BenchExecutable() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string bench = (ec ? std::filesystem::path("ciuic-bench") : self.parent_path() / "ciuic-bench").string();
  if (!std::filesystem::exists(bench)) throw RuntimeError(fmt::format("{} is missing (build it next to ciuic-tune)", bench));
  return bench;
}

namespace {
constexpr const char* kSingleCopyVar = "OMPI_MCA_btl_vader_single_copy_mechanism";
}

std::string LocalMpiSetting() {
  setenv(kSingleCopyVar, "none", 0);  // 0: a value the user set stays
  const char* v = std::getenv(kSingleCopyVar);
  return fmt::format("{}={}", kSingleCopyVar, v ? v : "");
}

nlohmann::json RunBenchJson(const std::string& args) {
  LocalMpiSetting();
  static std::atomic<int> serial{0};
  const auto out = std::filesystem::temp_directory_path() / fmt::format("ciuic_tune_{}_{}.json", getpid(), serial++);
  const std::string cmd = fmt::format("{} {} --format json --out {} >/dev/null 2>&1", BenchExecutable(), args, out.string());
  const int rc = std::system(cmd.c_str());
  nlohmann::json doc;
  bool ok = false;
  try {
    std::ifstream f(out);
    if (f) {
      doc = nlohmann::json::parse(f);
      ok = doc.contains("results");
    }
  } catch (const std::exception&) {
  }
  std::error_code ec;
  std::filesystem::remove(out, ec);
  if (rc != 0 || !ok)
    throw RuntimeError(fmt::format("ciuic-bench {} failed (exit status {}{})", args, rc, ok ? "" : ", no results"));
  return doc;
}

double BenchP50Us(const nlohmann::json& doc, double bytes) {
  for (const auto& r : doc.at("results")) {
    if (r.value("size_bytes", 0.0) != bytes) continue;
    for (const char* k : {"time_p50_us", "time_us"})
      if (r.contains(k) && r.at(k).is_number()) return r.at(k).get<double>();
  }
  return std::numeric_limits<double>::infinity();
}

}  // namespace ciuic
