#include "tuner/bench_runner.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/error.h"

namespace ciuic {

std::string BenchExecutable() {
  if (const char* env = std::getenv("CIUIC_BENCH_EXE"); env && *env) {
    if (access(env, X_OK) != 0) throw RuntimeError(fmt::format("CIUIC_BENCH_EXE '{}' is not an executable", env));
    return env;
  }
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

std::string DescribeExit(int status) {
  if (status == -1) return fmt::format("could not be started ({})", std::strerror(errno));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    // The shell's: a child it ran that died by a signal reports 128 + the signal.
    if (code > 128 && code < 128 + NSIG) return fmt::format("killed by signal {} ({})", code - 128, strsignal(code - 128));
    return fmt::format("exit {}", code);
  }
  return fmt::format("status {}", status);
}

namespace {
volatile sig_atomic_t g_signal = 0;
volatile pid_t g_child = 0;

extern "C" void OnInterrupt(int sig) {
  if (!g_signal) g_signal = sig;
  if (g_child > 0) {
    kill(g_child, sig);
    return;
  }
  char line[96];
  const int n = std::snprintf(line, sizeof line, "ciuic-tune: interrupted (%s); exit %d\n",
                              sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP", 128 + sig);
  if (n > 0) (void)!write(STDERR_FILENO, line, static_cast<size_t>(n));
  _exit(128 + sig);
}
}  // namespace

Interrupted::Interrupted(int sig)
    : std::runtime_error(fmt::format("interrupted ({}); what the study stored so far is kept",
                                     sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP")),
      sig_(sig) {}

void InstallInterruptHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnInterrupt;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

nlohmann::json RunBenchJson(const std::string& args) {
  LocalMpiSetting();
  static std::atomic<int> serial{0};
  const auto base = std::filesystem::temp_directory_path() / fmt::format("ciuic_tune_{}_{}", getpid(), serial++);
  const std::string out = base.string() + ".json", err = base.string() + ".err";
  // exec: the shell becomes ciuic-bench, which keeps the parent-death signal set below.
  const std::string cmd =
      fmt::format("exec {} {} --format json --out {} >/dev/null 2>{}", BenchExecutable(), args, out, err);
  if (g_signal) throw Interrupted(g_signal);
  const pid_t parent = getpid();
  const pid_t child = fork();
  int rc = -1;
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(143);  // ciuic-tune already gone
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) signal(sig, SIG_DFL);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  if (child > 0) {
    g_child = child;
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    g_child = 0;
    rc = status;
  }
  if (g_signal) {
    std::error_code ec;
    std::filesystem::remove(out, ec);
    std::filesystem::remove(err, ec);
    throw Interrupted(g_signal);
  }
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
  // The child's last line on stderr says why it failed (its one-line error, or mpiexec's).
  std::string last;
  {
    std::ifstream f(err);
    for (std::string line; std::getline(f, line);)
      if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  std::error_code ec;
  std::filesystem::remove(out, ec);
  std::filesystem::remove(err, ec);
  if (rc != 0 || !ok)
    throw RuntimeError(fmt::format("ciuic-bench {}: {}{}{}", args, rc == 0 ? "exit 0" : DescribeExit(rc),
                                   ok ? "" : ", no results", last.empty() ? "" : ": " + last.substr(0, 300)));
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
