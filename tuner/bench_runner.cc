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
#include <functional>
#include <limits>

#include "collectives/backends/gloo/communicator.h"
#include "collectives/backends/gloo/tcp_store.h"
#include "core/config.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"

namespace ciuic {

std::string BenchExecutable() {
  if (const char* env = std::getenv("CIUIC_BENCH_EXE"); env && *env) {
    // The user's setting: a bad one is bad input (exit 1), a folder included (it passes X_OK).
    std::error_code fs_ec;
    if (access(env, X_OK) != 0 || !std::filesystem::is_regular_file(env, fs_ec))
      throw InputError(fmt::format("CIUIC_BENCH_EXE '{}' is not an executable file", PrintableLine(env, 300)));
    return env;
  }
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string bench = (ec ? std::filesystem::path("ciuic-bench") : self.parent_path() / "ciuic-bench").string();
  if (!std::filesystem::exists(bench))
    throw RuntimeError(fmt::format("{} is missing (build it next to ciuic-tune)", bench));
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
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    // The shell's: a child it ran that died by a signal reports 128 + the signal.
    if (code > 128 && code < 128 + NSIG)
      return fmt::format("killed by signal {} ({})", code - 128, strsignal(code - 128));
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
                              sig == SIGINT    ? "SIGINT"
                              : sig == SIGTERM ? "SIGTERM"
                                               : "SIGHUP",
                              128 + sig);
  if (n > 0) (void)!write(STDERR_FILENO, line, static_cast<size_t>(n));
  _exit(128 + sig);
}
}  // namespace

Interrupted::Interrupted(int sig)
    : std::runtime_error(fmt::format("interrupted ({}); what the study stored so far is kept", sig == SIGINT ? "SIGINT"
                                                                                               : sig == SIGTERM
                                                                                                   ? "SIGTERM"
                                                                                                   : "SIGHUP")),
      sig_(sig) {}

void InstallInterruptHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnInterrupt;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

namespace {

// RunChild's status when `alive` said no: the child was ended (SIGTERM) and waited for.
constexpr int kGivenUp = -2;

// Runs `cmd` under /bin/sh as a child that dies with ciuic-tune (a parent-death SIGTERM) and returns
// its wait status (-1: not started); a signal to ciuic-tune meanwhile goes to the child (OnInterrupt).
// With `alive`, asked every 0.2 s while the child runs: false ends the child, kGivenUp.
int RunChild(const std::string& cmd, const std::function<bool()>& alive = {}) {
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
    while (alive) {
      const pid_t got = waitpid(child, &status, WNOHANG);
      if (got == child || (got < 0 && errno != EINTR)) break;
      if (got == 0 && !alive()) {
        kill(child, SIGTERM);
        while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
        }
        g_child = 0;
        return kGivenUp;
      }
      usleep(200000);
    }
    if (!alive) {
      while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
      }
    }
    g_child = 0;
    rc = status;
  }
  return rc;
}

// The ciuic-bench command line of one run: `--format json --out OUT`, stderr to ERR.
std::string BenchCommand(const std::string& args, const std::string& out, const std::string& err) {
  // exec: the shell becomes ciuic-bench, which keeps the parent-death signal set in RunChild.
  return fmt::format("exec {} {} --format json --out {} >/dev/null 2>{}", BenchExecutable(), args, out, err);
}

std::filesystem::path RunFiles() {
  static std::atomic<int> serial{0};
  return std::filesystem::temp_directory_path() / fmt::format("ciuic_tune_{}_{}", getpid(), serial++);
}

// The last non-blank line of a file ("" when none).
std::string LastLine(const std::string& path) {
  std::string last;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  return last;
}

#if CIUIC_HAVE_GLOO
constexpr const char* kRunKey = "ciuic-tune/run/";
constexpr const char* kLeadKey = "ciuic-tune/lead";  // set while rank 0's store serves
// Rank 0's store of a job's runs, and the next run's number.
struct JobLead {
  JobRank job;
  std::unique_ptr<TcpStoreServer> server;
  std::unique_ptr<TcpStore> store;
  uint64_t next = 0;
  bool ended = false;
};
std::unique_ptr<JobLead> g_lead;
#endif

}  // namespace

int JobRunsPort(const JobRank& job) {
  if (job.store_port >= 65535)
    throw UsageError(fmt::format("the job's store port {}: ciuic-tune also needs the port after it", job.store_port));
  return job.store_port + 1;
}

#if CIUIC_HAVE_GLOO
void LeadJobRuns(const JobRank& job) {
  auto lead = std::make_unique<JobLead>();
  lead->job = job;
  const int port = JobRunsPort(job);
  // The followers reach it at the job's store host: an IPv6 one needs an IPv6 socket (which takes
  // IPv4 peers too).
  const bool v6 = NumericAddress(job.store_host).front() == '[';
  lead->server = std::make_unique<TcpStoreServer>(v6 ? "::" : "0.0.0.0", port);
  lead->store = std::make_unique<TcpStore>(fmt::format("{}:{}", v6 ? "[::1]" : "127.0.0.1", port),
                                           std::chrono::milliseconds(30000));
  lead->store->set(kLeadKey, {'1'});
  g_lead = std::move(lead);
}

const JobRank* LedJob() { return g_lead ? &g_lead->job : nullptr; }

void EndJobRuns(int code) {
  if (!g_lead || g_lead->ended) return;
  g_lead->ended = true;
  const std::string v = fmt::format("end {}", code);
  try {
    g_lead->store->set(fmt::format("{}{}", kRunKey, g_lead->next), std::vector<char>(v.begin(), v.end()));
    // The followers read it before the store goes: each says it did. Interrupted, they mostly were too
    // (the launcher passed the signal on, or its agent ended): a moment, not 10 s for ranks already
    // gone; a follower that was not interrupted and misses the end says rank 0 went away (exit 2).
    std::vector<std::string> keys;
    for (int r = 1; r < g_lead->job.size; ++r) keys.push_back(fmt::format("ciuic-tune/ended/{}", r));
    g_lead->store->wait(keys, std::chrono::milliseconds(g_signal ? 1000 : 10000));
  } catch (const std::exception& e) {
    LogInfo("note: not every rank heard that the study ended ({}); they end when this process does", e.what());
  }
}

int FollowJobRuns(const JobRank& job, double timeout_s) {
  const std::string endpoint = fmt::format("{}:{}", NumericAddress(job.store_host), JobRunsPort(job));
  // Rank 0 may take a while to serve (it checks its inputs first) and between runs (the accuracy
  // gate trains models): waits are long, but its store closing ends them at once.
  const auto wait = std::chrono::milliseconds(static_cast<int64_t>(std::max(timeout_s, 1.0) * 1000));
  TcpStore store(endpoint, wait, /*wait_for_server=*/true);
  for (uint64_t k = 0;; ++k) {
    std::vector<char> v;
    try {
      v = store.get(fmt::format("{}{}", kRunKey, k));
    } catch (const std::exception& e) {
      throw RuntimeError(fmt::format("rank {} of {}: rank 0's ciuic-tune at {} went away before the study ended ({})",
                                     job.rank, job.size, endpoint, e.what()));
    }
    const std::string args(v.begin(), v.end());
    if (args.rfind("end ", 0) == 0) {
      const std::string ended = fmt::format("ciuic-tune/ended/{}", job.rank);
      store.set(ended, {'1'});
      return std::atoi(args.c_str() + 4);
    }
    if (g_signal) throw Interrupted(g_signal);
    const auto base = RunFiles();
    const std::string out = base.string() + ".json", err = base.string() + ".err";
    // A run whose rank 0 died waits for it until its own deadline: rank 0's store closing ends it.
    const int rc = RunChild(BenchCommand(args, out, err), [&] {
      try {
        store.wait({kLeadKey}, std::chrono::milliseconds(2000));
        return true;
      } catch (const std::exception&) {
        return false;
      }
    });
    const std::string last = LastLine(err);
    std::error_code ec;
    std::filesystem::remove(out, ec);
    std::filesystem::remove(err, ec);
    if (g_signal) throw Interrupted(g_signal);
    if (rc == kGivenUp)
      throw RuntimeError(
          fmt::format("rank {} of {}: rank 0's ciuic-tune at {} went away before the study ended (its "
                      "store closed during ciuic-bench {})",
                      job.rank, job.size, endpoint, args));
    // Rank 0's run fails with this one and reports it; a line here says which rank saw what.
    if (rc != 0)
      LogInfo("rank {}: ciuic-bench {}: {}{}", job.rank, args, DescribeExit(rc), last.empty() ? "" : ": " + last);
  }
}
#else
void LeadJobRuns(const JobRank&) {
  throw UsageError("ciuic-tune under torchrun or srun needs gloo (install libgloo-dev and configure again)");
}
const JobRank* LedJob() { return nullptr; }
void EndJobRuns(int) {}
int FollowJobRuns(const JobRank&, double) {
  throw UsageError("ciuic-tune under torchrun or srun needs gloo (install libgloo-dev and configure again)");
}
#endif

void CheckBenchAccepts(const std::string& args, const std::string& option, const std::string& text) {
  const auto base = RunFiles();
  const std::string out = base.string() + ".json", err = base.string() + ".err";
  const int rc = RunChild(BenchCommand(args + " --dry-run", out, err));
  std::string last = LastLine(err);
  std::error_code ec;
  std::filesystem::remove(out, ec);
  std::filesystem::remove(err, ec);
  if (g_signal) throw Interrupted(g_signal);
  if (rc == 0) return;
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 1) {
    // "ciuic-bench: --sizes 1099511627776: size 1T does not fit: ..." -> "size 1T does not fit: ..."
    const std::string tool = "ciuic-bench: ";
    if (last.rfind(tool, 0) == 0) last.erase(0, tool.size());
    // Its --sizes are the user's `option`; any other refusal (a build without MPI, a bad
    // CIUIC_TIMEOUT) is named as ciuic-bench said it, with the run that was asked about.
    if (const size_t colon = last.find(": "); last.rfind("--sizes ", 0) == 0 && colon != std::string::npos)
      throw InputError(fmt::format("{} {}: {}", option, text, last.substr(colon + 2)));
    throw InputError(fmt::format("ciuic-bench {} --dry-run: {}", args, last.empty() ? "exit 1" : last));
  }
  throw RuntimeError(
      fmt::format("ciuic-bench {} --dry-run: {}{}", args, DescribeExit(rc), last.empty() ? "" : ": " + last));
}

nlohmann::json RunBenchJson(const std::string& args) {
  LocalMpiSetting();
  const auto base = RunFiles();
  const std::string out = base.string() + ".json", err = base.string() + ".err";
  if (g_signal) throw Interrupted(g_signal);
#if CIUIC_HAVE_GLOO
  if (g_lead && !g_lead->ended)  // every rank of the job starts this run with rank 0
    g_lead->store->set(fmt::format("{}{}", kRunKey, g_lead->next++), std::vector<char>(args.begin(), args.end()));
#endif
  const int rc = RunChild(BenchCommand(args, out, err));
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
  const std::string last = LastLine(err);
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
