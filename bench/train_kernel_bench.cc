#include "bench/train_kernel_bench.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "bench/cli_args.h"
#include "bench/reporters/cell_rows.h"
#include "core/buffer.h"
#include "core/config.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "core/parallel.h"
#include "core/sizes.h"
#include "kernels/codec_kernels.h"
#include "kernels/train_kernels.h"
#include "kernels/train_sequences.h"

namespace ciuic {

namespace {

using namespace cells;  // NOLINT: the rows and reporters this command prints

// Tokens x hidden of the shipped workloads (profiles/workloads): 4096 tokens (BERT-large: 8 x 512;
// GPT-2 XL: 4 x 1024; Llama-2 7B: 2 x 2048) at each one's hidden size.
constexpr const char* kDefaultShapes = "4096x1024,4096x1600,4096x4096";

struct Shape {
  size_t rows, cols;
};

struct KernelBenchOptions {
  std::vector<const TrainKernelName*> kernels;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  float p = 0.1f;
  bool device = false;
  int iters = 0;  // 0: auto
  bool torch = true;
  std::string format = "table";
  std::string out_path;
  uint64_t seed = 24301;
};

std::vector<Shape> ParseShapes(const std::string& text) {
  std::vector<Shape> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string one = text.substr(start, comma - start);
    const size_t x = one.find('x');
    if (x == std::string::npos) throw BadOption("shape", text, fmt::format("'{}' is not TOKENSxHIDDEN", one));
    Shape s{};
    try {
      s.rows = ParseSize(one.substr(0, x));
      s.cols = ParseSize(one.substr(x + 1));
    } catch (const Error& e) {
      throw BadOption("shape", text, fmt::format("'{}': {}", one, e.what()));
    }
    if (s.rows == 0 || s.cols == 0 || s.rows > (1u << 24) || s.cols > (1u << 20) || s.rows * s.cols > (1ull << 31))
      throw BadOption("shape", text,
                      fmt::format("'{}': tokens in 1..16M, hidden in 1..1M, at most 2^31 elements", one));
    out.push_back(s);
    start = comma + 1;
  }
  return out;
}

KernelBenchOptions ParseKernelBench(int argc, char** argv) {
  std::string help =
      "Usage: ciuic-bench kernel NAME --shape TOKENSxHIDDEN [options]\n\nTraining kernels (fused vs unfused vs "
      "PyTorch eager, forward and backward):\n";
  for (const auto& k : TrainKernelNames()) help += fmt::format("  {:<22} {}\n", k.name, k.help);
  help += "  all-training           every one of them\n";
  cxxopts::Options opts("ciuic-bench", help);
  // clang-format off
  opts.add_options()
      ("shape", "TOKENSxHIDDEN, or a comma list", cxxopts::value<std::string>()->default_value(kDefaultShapes))
      ("dtype", "fp32 | fp16 | bf16, or a comma list", cxxopts::value<std::string>()->default_value("fp32"))
      ("p,dropout", "dropout probability (ln-dropout-*)", cxxopts::value<std::string>()->default_value("0.1"))
      ("device", "cpu | cuda (default: cuda when a GPU is present)", cxxopts::value<std::string>())
      ("iters", "timed iterations (default: auto, 3..50, ~0.3 s per measurement)", cxxopts::value<int>())
      ("torch", "auto | no: time PyTorch's eager sequence too", cxxopts::value<std::string>()->default_value("auto"))
      ("format", "table | csv | json", cxxopts::value<std::string>()->default_value("table"))
      ("out", "write the --format output to FILE (the table still goes to stdout)", cxxopts::value<std::string>())
      ("seed", "data and dropout seed", cxxopts::value<uint64_t>()->default_value("24301"))
      ("h,help", "this help")
      ("command", "", cxxopts::value<std::string>())
      ("name", "", cxxopts::value<std::string>());
  // clang-format on
  opts.parse_positional({"command", "name"});
  const cxxopts::ParseResult r = ParseOrExit(opts, argc, argv);
  KernelBenchOptions o;
  if (!r.count("name")) throw UsageError("kernel: missing NAME (try --help)");
  const std::string name = r["name"].as<std::string>();
  for (const auto& k : TrainKernelNames())
    if (name == "all-training" || name == k.name) o.kernels.push_back(&k);
  if (o.kernels.empty()) throw UsageError(fmt::format("unknown training kernel '{}'", name));
  o.shapes = ParseShapes(r["shape"].as<std::string>());
  const std::string dtypes = r["dtype"].as<std::string>();
  for (size_t start = 0; start <= dtypes.size();) {
    const size_t comma = std::min(dtypes.find(',', start), dtypes.size());
    DType t;
    try {
      t = ParseDType(dtypes.substr(start, comma - start));
    } catch (const Error& e) {
      throw BadOption("dtype", dtypes, e.what());
    }
    if (t != DType::kFloat32 && t != DType::kFloat16 && t != DType::kBFloat16)
      throw BadOption("dtype", dtypes, "the training kernels take fp32, fp16 or bf16");
    o.dtypes.push_back(t);
    start = comma + 1;
  }
  // About 13 tensors of the largest shape live at once (inputs, outputs, the unfused sequence's
  // intermediates, host staging): refuse a shape this host cannot hold instead of dying in the middle.
  const double host_bytes = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  for (const Shape& sh : o.shapes)
    for (DType t : o.dtypes) {
      const double need = 13.0 * static_cast<double>(sh.rows) * static_cast<double>(sh.cols) * DTypeSize(t);
      if (host_bytes > 0 && need > 0.8 * host_bytes)
        throw BadOption("shape", r["shape"].as<std::string>(),
                        fmt::format("{}x{} {} needs about {:.1f} GiB of memory, this host has {:.1f} GiB", sh.rows,
                                    sh.cols, DTypeName(t), need / (1 << 30), host_bytes / (1 << 30)));
    }
  const std::string p = r["dropout"].as<std::string>();
  const double pv = NumberOption("dropout", p);
  o.p = static_cast<float>(pv);  // the kernels take fp32: judge the value they would get
  if (!(o.p >= 0.0f && o.p < 1.0f)) throw BadOption("dropout", p, "must be in [0, 1) as an fp32 value");
  if (pv != 0.0 && o.p == 0.0f) throw BadOption("dropout", p, "rounds to 0 in fp32 (no dropout): give 0 or a larger p");
  if (r.count("iters")) {
    o.iters = r["iters"].as<int>();
    if (o.iters < 1 || o.iters > 100000) throw BadOption("iters", std::to_string(o.iters), "must be in 1..100000");
  }
  const std::string torch = r["torch"].as<std::string>();
  if (torch != "auto" && torch != "no") throw BadOption("torch", torch, "auto | no");
  o.torch = torch == "auto";
  o.format = r["format"].as<std::string>();
  if (o.format != "table" && o.format != "csv" && o.format != "json")
    throw BadOption("format", o.format, "table | csv | json");
  if (r.count("out")) {
    o.out_path = r["out"].as<std::string>();
    CheckPathGiven("--out", o.out_path);
    CheckWritableOutput(o.out_path, "--out");
  }
  o.seed = r["seed"].as<uint64_t>();
  const std::string device = r.count("device") ? r["device"].as<std::string>() : (cuda::Available() ? "cuda" : "cpu");
  if (device != "cpu" && device != "cuda") throw BadOption("device", device, "cpu | cuda");
  if (device == "cuda" && !cuda::Available())
    throw RuntimeError("--device cuda: no CUDA device is available (or this build has no CUDA)");
  o.device = device == "cuda";
  return o;
}

// ---- tensors and timing -------------------------------------------------------------------------------

MemoryKind Kind(bool device) { return device ? MemoryKind::kDevice : MemoryKind::kHost; }

// The copy of `bytes` this run compares with: all ParallelFor threads memcpy on the host (the kernels
// use the same threads), cudaMemcpy device to device on the GPU.
double KernelCopyUs(size_t bytes, bool device, int iters) {
  Buffer src(std::max<size_t>(bytes, 4), Kind(device)), dst(std::max<size_t>(bytes, 4), Kind(device));
  const std::vector<uint8_t> ones(bytes, 1);
  CopyBytes(src.data(), Kind(device), ones.data(), MemoryKind::kHost, bytes);
  return MedianRunUs(device, iters, [&] {
    if (device) {
      CopyBytes(dst.data(), MemoryKind::kDevice, src.data(), MemoryKind::kDevice, bytes);
      return;
    }
    ParallelFor(bytes, [&](size_t b, size_t e) {
      std::memcpy(static_cast<uint8_t*>(dst.data()) + b, static_cast<const uint8_t*>(src.data()) + b, e - b);
    });
  });
}

// ---- PyTorch's eager sequence, timed by python/ciuic/kernel_bench.py -----------------------------------

std::string KernelBenchScript() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("CIUIC_PYTHONPATH"); env && *env) candidates.push_back(fs::path(env) / "ciuic");
  std::error_code ec;
  if (const fs::path exe = fs::read_symlink("/proc/self/exe", ec); !ec)
    candidates.push_back(exe.parent_path() / ".." / ".." / "python" / "ciuic");  // build tree: build/bin
  // Installed: where cmake/install_python.cmake puts the package under the prefix, lib/pythonX.Y/site-packages,
  // or on Debian (/usr/local, /usr) lib/python3.11/dist-packages and lib/python3/dist-packages.
  const fs::path prefix_lib = fs::path(ShareDir()) / ".." / ".." / "lib";
  for (const auto& entry : fs::directory_iterator(prefix_lib, ec))
    if (entry.path().filename().string().rfind("python", 0) == 0)
      for (const char* packages : {"site-packages", "dist-packages"})
        candidates.push_back(entry.path() / packages / "ciuic");
  for (const auto& c : candidates)
    if (fs::is_regular_file(c / "kernel_bench.py", ec)) return (c / "kernel_bench.py").lexically_normal().string();
  return "";
}

struct TorchTimes {
  double forward_us = NAN, backward_us = NAN;
  std::string note;  // why there are none, or what the reference did (an upcast)
};

// One Python process (`python3 -m ciuic.kernel_bench --serve`) for every PyTorch row of a run: torch is
// imported and CUDA started once (a process a row spent 2-7 s of each row on that). Started at the
// first row; a request is one JSON line on its stdin, the answer one JSON line on its stdout (its stderr
// joins stdout; lines that are not JSON are skipped, the last one kept to say why when it ends).
class TorchServer {
 public:
  TorchServer() = default;
  TorchServer(const TorchServer&) = delete;
  TorchServer& operator=(const TorchServer&) = delete;
  ~TorchServer() {
    if (to_ >= 0) close(to_);  // end of input: the server returns
    if (from_) fclose(from_);
    Reap(nullptr);
  }

  // The answer's JSON line for one run's flags, or "" with *why set.
  std::string Ask(const std::vector<std::string>& argv, std::string* why) {
    if (!dead_.empty() || (pid_ < 0 && !Start())) {
      *why = dead_;
      return "";
    }
    const std::string line = nlohmann::json{{"argv", argv}}.dump() + "\n";
    if (!WriteAll(line)) return Died("it stopped reading", why);
    std::array<char, 4096> buf{};
    std::string text, last;
    while (fgets(buf.data(), buf.size(), from_)) {
      text += buf.data();
      if (text.empty() || text.back() != '\n') continue;  // a longer line: read on
      text.pop_back();
      if (!text.empty() && text[0] == '{') return text;
      if (!text.empty()) last = text;
      text.clear();
    }
    return Died(last, why);
  }

 private:
  bool Start() {
    const std::string script = KernelBenchScript();
    if (script.empty()) {
      dead_ = "kernel_bench.py not found";
      return false;
    }
    const char* env = std::getenv("CIUIC_PYTHON");
    python_ = env && *env ? env : "/usr/bin/python3";
    const std::string path = std::filesystem::path(script).parent_path().parent_path().string();
    const char* old = std::getenv("PYTHONPATH");
    // The child's environment and arguments, built here: between fork and exec only async-signal-safe calls.
    std::vector<std::string> env_text = {"PYTHONPATH=" + (old && *old ? path + ":" + old : path)};
    for (char** e = environ; *e; ++e)
      if (std::strncmp(*e, "PYTHONPATH=", 11) != 0) env_text.emplace_back(*e);
    std::vector<char*> envp;
    for (std::string& e : env_text) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string a0 = python_, a1 = "-m", a2 = "ciuic.kernel_bench", a3 = "--serve";
    char* args[] = {a0.data(), a1.data(), a2.data(), a3.data(), nullptr};
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0) return Failed();
    if (pipe2(out, O_CLOEXEC) != 0) {
      close(in[0]);
      close(in[1]);
      return Failed();
    }
    std::fflush(nullptr);
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      // The server ends with ciuic-bench, even a SIGKILLed one (as every child of the tools does).
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(143);
      dup2(in[0], 0);
      dup2(out[1], 1);
      dup2(out[1], 2);
      execvpe(args[0], args, envp.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    if (pid_ < 0) {
      close(in[1]);
      close(out[0]);
      return Failed();
    }
    to_ = in[1];
    from_ = fdopen(out[0], "r");
    return from_ != nullptr || Failed();
  }

  bool Failed() {
    dead_ = fmt::format("could not start {}: {}", python_, std::strerror(errno));
    return false;
  }

  // SIGPIPE held back while writing: a server that died is an answer, not the end of ciuic-bench.
  bool WriteAll(const std::string& s) {
    sigset_t pipe_only, old;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
    size_t done = 0;
    bool ok = true;
    while (done < s.size()) {
      const ssize_t n = write(to_, s.data() + done, s.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ok = false;
        break;
      }
      done += static_cast<size_t>(n);
    }
    if (!ok) {
      const timespec now{0, 0};
      sigtimedwait(&pipe_only, nullptr, &now);  // the pending SIGPIPE, if any
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return ok;
  }

  // Why the server is gone: a Python that never started (exec failed: exit 127, whether the request's
  // write or the answer's read found it gone first), else its last words, else its failure.
  std::string Died(const std::string& last, std::string* why) {
    int status = 0;
    Reap(&status);
    dead_ = WIFEXITED(status) && WEXITSTATUS(status) == 127 ? fmt::format("could not start {}", python_)
            : !last.empty()                                 ? last
                                                            : fmt::format("{} failed", python_);
    *why = dead_;
    return "";
  }

  void Reap(int* status) {
    if (pid_ <= 0) return;
    while (waitpid(pid_, status, 0) < 0 && errno == EINTR) {
    }
    pid_ = 0;
  }

  std::string python_;
  pid_t pid_ = -1;
  int to_ = -1;
  FILE* from_ = nullptr;
  std::string dead_;
};

TorchTimes TimeTorch(TorchServer& server, const TrainKernelName& k, Shape s, DType t, const KernelBenchOptions& o) {
  TorchTimes out;
  const std::string name = k.family == TrainFamily::kLnActDropout ? "ln-dropout-gelu"
                           : k.family == TrainFamily::kBiasAct    ? "bias-gelu"
                                                                  : "add-ln";
  const std::vector<std::string> argv = {"--name",    name,
                                         "--act",     ActivationName(k.act),
                                         "--shape",   fmt::format("{}x{}", s.rows, s.cols),
                                         "--dtype",   DTypeName(t),
                                         "--device",  o.device ? "cuda" : "cpu",
                                         "--p",       fmt::format("{}", o.p),
                                         "--threads", std::to_string(ParallelThreads()),
                                         "--iters",   std::to_string(o.iters ? o.iters : 10),
                                         "--warmup",  "2"};
  std::string why;
  const std::string line = server.Ask(argv, &why);
  if (line.empty()) {
    out.note = why;
    return out;
  }
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded()) {
    out.note = "kernel_bench.py printed no JSON";
    return out;
  }
  if (j.contains("error") && j["error"].is_string()) {
    out.note = j["error"].get<std::string>();
    return out;
  }
  if (j.contains("forward_us") && j["forward_us"].is_number()) out.forward_us = j["forward_us"].get<double>();
  if (j.contains("backward_us") && j["backward_us"].is_number()) out.backward_us = j["backward_us"].get<double>();
  if (j.contains("note") && j["note"].is_string()) out.note = j["note"].get<std::string>();
  if (j.contains("torch") && j["torch"].is_string())
    out.note = fmt::format("torch {}{}{}", j["torch"].get<std::string>(), out.note.empty() ? "" : ": ", out.note);
  return out;
}

// ---- one kernel at one shape and dtype ------------------------------------------------------------------

struct PassTiming {
  double fused_us, unfused_us;
  double diff;  // fused against unfused, relative
};

struct Case {
  const TrainKernelName& k;
  Shape s;
  DType t;
  const KernelBenchOptions& o;
  size_t bytes() const { return s.rows * s.cols * DTypeSize(t); }
};

std::pair<PassTiming, PassTiming> RunCase(const Case& c, TrainSequence& seq) {
  const bool dev = c.o.device;
  PassTiming forward{}, backward{};
  forward.fused_us = MedianRunUs(dev, c.o.iters, [&] { seq.FusedForward(); });
  forward.unfused_us = MedianRunUs(dev, c.o.iters, [&] { seq.UnfusedForward(); });
  seq.FusedForward();  // what the backward passes read (both forwards write the same statistics)
  seq.UnfusedForward();
  WaitForDevice(dev);
  forward.diff = seq.ForwardDiff();
  backward.fused_us = MedianRunUs(dev, c.o.iters, [&] { seq.FusedBackward(); });
  backward.unfused_us = MedianRunUs(dev, c.o.iters, [&] { seq.UnfusedBackward(); });
  seq.FusedBackward();
  seq.UnfusedBackward();
  WaitForDevice(dev);
  backward.diff = seq.BackwardDiff();
  return {forward, backward};
}

Row MakeRow(const Case& c, const char* pass, const char* variant, double us, double fused_us, double bytes,
            double copy_bytes_per_us, double diff) {
  const double gbps = us > 0 ? bytes / us / 1e3 : NAN;
  return {{"kernel", std::string(c.k.name), 20},
          {"tokens", static_cast<int64_t>(c.s.rows), 7},
          {"hidden", static_cast<int64_t>(c.s.cols), 6},
          {"dtype", std::string(DTypeName(c.t)), 5},
          {"pass", std::string(pass), 8},
          {"variant", std::string(variant), 11},
          {"time_us", us, 10, 1},
          {"GB/s", gbps, 7},
          {"%copy", us > 0 ? 100.0 * bytes / us / copy_bytes_per_us : NAN, 6, 1},
          {"x_fused", us > 0 && fused_us > 0 ? us / fused_us : NAN, 7},
          {"diff", diff, 9, 2}};
}

}  // namespace

bool IsTrainKernelName(std::string_view name) {
  if (name == "all-training") return true;
  for (const auto& k : TrainKernelNames())
    if (name == k.name) return true;
  return false;
}

int TrainKernelBenchMain(int argc, char** argv) {
  const KernelBenchOptions o = ParseKernelBench(argc, argv);
  std::vector<Row> rows;
  std::vector<std::string> notes;
  const std::string device = o.device ? fmt::format("cuda ({})", CudaDeviceName())
                                      : fmt::format("cpu ({}), {} threads", CpuModelName(), ParallelThreads());
  std::cout << fmt::format("# ciuic-bench kernel: training kernels on {}; dropout p {}; time = median us\n", device,
                           o.p);
  std::cout << "# GB/s: bytes the pass must move once / time; %copy: of the same run's copy (read + write bytes/s); "
               "x_fused: time / fused time; diff: max|fused - unfused| / max|unfused|\n";
  std::cout.flush();
  TorchServer server;
  for (const TrainKernelName* k : o.kernels) {
    for (Shape s : o.shapes) {
      for (DType t : o.dtypes) {
        const Case c{*k, s, t, o};
        const double copy_us = KernelCopyUs(c.bytes(), o.device, o.iters);
        const double copy_bytes_per_us = 2.0 * c.bytes() / copy_us;
        TrainSequence seq(*k, s.rows, s.cols, t, o.device, o.p, o.seed);
        const auto [fwd, bwd] = RunCase(c, seq);
        const TorchTimes torch = o.torch ? TimeTorch(server, *k, s, t, o) : TorchTimes{};
        std::vector<Row> here;
        here.push_back(MakeRow(c, "-", "copy", copy_us, NAN, 2.0 * c.bytes(), copy_bytes_per_us, NAN));
        for (int b = 0; b < 2; ++b) {
          const PassTiming& pass_times = b ? bwd : fwd;
          const char* pass = b ? "backward" : "forward";
          const double bytes = seq.MustMoveBytes(b == 1);
          here.push_back(
              MakeRow(c, pass, "fused", pass_times.fused_us, pass_times.fused_us, bytes, copy_bytes_per_us, NAN));
          here.push_back(MakeRow(c, pass, "unfused", pass_times.unfused_us, pass_times.fused_us, bytes,
                                 copy_bytes_per_us, pass_times.diff));
          here.push_back(MakeRow(c, pass, "torch-eager", b ? torch.backward_us : torch.forward_us, pass_times.fused_us,
                                 bytes, copy_bytes_per_us, NAN));
        }
        if (!torch.note.empty() && std::find(notes.begin(), notes.end(), torch.note) == notes.end())
          notes.push_back(torch.note);
        if (o.format == "table" || !o.out_path.empty()) {
          std::string text = TableText(here);
          if (!rows.empty()) text = text.substr(text.find('\n') + 1);  // the header once
          std::cout << text;
          std::cout.flush();
        }
        rows.insert(rows.end(), here.begin(), here.end());
      }
    }
  }
  for (const std::string& note : notes) std::cout << "# torch-eager: " << note << "\n";
  std::string text;
  if (o.format == "csv") text = CsvText(rows);
  if (o.format == "json") {
    nlohmann::json doc = {{"schema", "ciuic.kernel_bench/1"}, {"device", device}, {"p", o.p}, {"rows", JsonRows(rows)}};
    doc["torch_notes"] = notes;
    text = doc.dump(1) + "\n";
  }
  if (o.format == "table") text = TableText(rows);
  if (!o.out_path.empty()) {
    WriteFileAtomically(o.out_path, text);
  } else if (o.format != "table") {
    std::cout << text;
  }
  return 0;
}

}  // namespace ciuic
