#include "bench/codec_bench.h"

#include "bench/cli_args.h"
#include "bench/reporters/cell_rows.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <thread>
#include <variant>
#include <vector>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "core/buffer.h"
#include "core/config.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "core/parallel.h"
#include "core/sizes.h"
#include "core/timer.h"
#include "kernels/codec.h"

#if CIUIC_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#endif

namespace ciuic {

namespace {

using namespace cells;  // NOLINT: the rows and reporters this command prints

// ---- options ----------------------------------------------------------------------------------------

struct CodecBenchOptions {
  std::string command;  // compress | kernel
  std::string kernel;   // kernel name
  CodecSpec spec;
  std::vector<uint64_t> sizes;
  std::string sizes_text;  // --sizes as given, for the messages that refuse one of its sizes
  bool device = false;
  std::string data = "both";
  int iters = 0;  // 0: auto
  int tensors = 256;
  bool clip = false;
  std::string format = "table";
  std::string out_path;
  bool ef = false;
  std::vector<std::string> argv;
};

const char* const kKernels[][2] = {
    {"ef-quantize", "(a) error-feedback add + quantise + pack (codec from --codec)"},
    {"decode-accumulate", "(b) decode + fp32 accumulate"},
    {"decode-add-encode", "(c) decode + add + re-encode: one hop of a compressed reduce-scatter"},
    {"flatten", "(d) many gradients into one bucket and back (--tensors N)"},
    {"unscale", "(e) unscale + NaN/Inf check + norm (and the clip pass with --clip)"},
};

// The kernels that encode or decode one element codec (`all` skips them for other codecs).
bool TakesElementCodec(const std::string& kernel) {
  return kernel == "ef-quantize" || kernel == "decode-accumulate" || kernel == "decode-add-encode";
}

std::string CanonicalKernel(const std::string& name) {
  static const char* const kShort[] = {"a", "b", "c", "d", "e"};
  for (int i = 0; i < 5; ++i)
    if (name == kShort[i] || name == kKernels[i][0]) return kKernels[i][0];
  if (name == "all") return "all";
  std::string known;
  for (const auto& k : kKernels) known += std::string(known.empty() ? "" : ", ") + k[0];
  throw UsageError(
      fmt::format("unknown kernel '{}' (known: {}, or a..e, all; training kernels: ln-dropout-gelu, "
                  "bias-gelu, add-ln and more: ciuic-bench kernel all-training --help)",
                  name, known));
}

CodecBenchOptions ParseCodecBench(int argc, char** argv) {
  std::string help =
      "Usage: ciuic-bench compress --codec C [options]\n       ciuic-bench kernel NAME [options]\n\nKernels:\n";
  for (const auto& k : kKernels) help += fmt::format("  {:<18} {}\n", k[0], k[1]);
  help +=
      "\nTraining kernels (fused vs unfused vs PyTorch eager): ln-dropout-gelu, ln-dropout-gelu-tanh, "
      "ln-dropout-relu,\n  bias-gelu, bias-gelu-tanh, bias-relu, add-ln, all-training; their options: "
      "ciuic-bench kernel all-training --help\n";
  cxxopts::Options opts("ciuic-bench", help);
  // clang-format off
  opts.add_options()
      ("codec", "none fp16 bf16 fp8e4m3 fp8e5m2 int8 int4 sign1 topk:RATIO randomk:RATIO powersgd:RANK", cxxopts::value<std::string>()->default_value("int8"))
      ("sizes", "fp32 gradient bytes per size: MIN:MAX[:xF|:+STEP] or a comma list", cxxopts::value<std::string>()->default_value("64M"))
      ("device", "cpu | cuda (default: cuda when a GPU is present)", cxxopts::value<std::string>())
      ("block", "elements per scale block (fp8/int8/int4/sign1), multiple of 32", cxxopts::value<uint32_t>()->default_value("256"))
      ("rounding", "nearest | stochastic", cxxopts::value<std::string>()->default_value("nearest"))
      ("select", "topk selection: exact | sampled", cxxopts::value<std::string>()->default_value("sampled"))
      ("prescale", "fp16/bf16: multiply before the cast", cxxopts::value<float>()->default_value("1"))
      ("ef", "compress: encode with error feedback (yes | no)", cxxopts::value<std::string>()->default_value("no"))
      ("data", "normal | heavy | both (gradient distributions)", cxxopts::value<std::string>()->default_value("both"))
      ("iters", "timed iterations (default: auto, 3..50, ~0.3 s per measurement)", cxxopts::value<int>())
      ("tensors", "flatten: tensors per bucket", cxxopts::value<int>()->default_value("256"))
      ("clip", "unscale: also time the clip-by-norm pass")
      ("format", "table | csv | json", cxxopts::value<std::string>()->default_value("table"))
      ("out", "write the --format output to FILE (the table still goes to stdout)", cxxopts::value<std::string>())
      ("seed", "data and codec seed", cxxopts::value<uint64_t>()->default_value("24301"))
      ("h,help", "this help")
      ("command", "", cxxopts::value<std::string>())
      ("name", "", cxxopts::value<std::string>());
  // clang-format on
  opts.parse_positional({"command", "name"});
  const cxxopts::ParseResult r = ParseOrExit(opts, argc, argv);
  CodecBenchOptions o;
  for (int i = 0; i < argc; ++i) o.argv.push_back(argv[i]);
  o.command = r["command"].as<std::string>();
  if (o.command == "kernel") {
    if (!r.count("name")) throw UsageError("kernel: missing NAME (try --help)");
    o.kernel = CanonicalKernel(r["name"].as<std::string>());
  } else if (r.count("name")) {
    throw UsageError(fmt::format("unexpected argument '{}'", r["name"].as<std::string>()));
  }
  const std::string codec = r["codec"].as<std::string>();
  try {
    o.spec = ParseCodec(codec);
  } catch (const Error& e) {
    throw BadOption("codec", codec, e.what());
  }
  o.spec.block = r["block"].as<uint32_t>();
  const std::string rounding = r["rounding"].as<std::string>();
  try {
    o.spec.rounding = ParseRounding(rounding);
  } catch (const Error& e) {
    throw BadOption("rounding", rounding, e.what());
  }
  const std::string sel = r["select"].as<std::string>();
  if (sel != "exact" && sel != "sampled") throw UsageError(fmt::format("--select '{}': exact | sampled", sel));
  o.spec.select = sel == "exact" ? TopKSelect::kExact : TopKSelect::kSampled;
  o.spec.prescale = r["prescale"].as<float>();
  o.spec.seed = r["seed"].as<uint64_t>();
  const std::string ef = r["ef"].as<std::string>();
  if (ef != "yes" && ef != "no") throw UsageError(fmt::format("--ef '{}': yes | no", ef));
  o.ef = ef == "yes";
  o.sizes_text = r["sizes"].as<std::string>();
  try {
    o.sizes = ParseSizeList(o.sizes_text);
  } catch (const Error& e) {
    throw BadOption("sizes", o.sizes_text, e.what());
  }
  for (uint64_t s : o.sizes)
    if (s < 4) throw BadOption("sizes", o.sizes_text, fmt::format("{} B holds no fp32 element (4 B)", s));
  o.data = r["data"].as<std::string>();
  if (o.data != "normal" && o.data != "heavy" && o.data != "both")
    throw UsageError(fmt::format("--data '{}': normal | heavy | both", o.data));
  if (r.count("iters")) {
    o.iters = r["iters"].as<int>();
    if (o.iters < 1) throw UsageError(fmt::format("--iters {} must be at least 1", o.iters));
  }
  o.tensors = r["tensors"].as<int>();
  if (o.tensors < 1 || o.tensors > 1000000)
    throw UsageError(fmt::format("--tensors {} must be in 1..1000000", o.tensors));
  o.clip = r.count("clip") > 0;
  o.format = r["format"].as<std::string>();
  if (o.format != "table" && o.format != "csv" && o.format != "json")
    throw UsageError(fmt::format("--format '{}': table | csv | json", o.format));
  if (r.count("out")) {
    o.out_path = r["out"].as<std::string>();
    CheckPathGiven("--out", o.out_path);
  }
  std::string device = r.count("device") ? r["device"].as<std::string>() : (cuda::Available() ? "cuda" : "cpu");
  if (device != "cpu" && device != "cuda") throw UsageError(fmt::format("--device '{}': cpu | cuda", device));
  if (device == "cuda" && !cuda::Available())
    throw RuntimeError("--device cuda: no CUDA device is available (or this build has no CUDA)");
  o.device = device == "cuda";
  const Codec check(o.spec);  // validates block, prescale, ratio, rank
  if (o.command == "kernel" && TakesElementCodec(o.kernel) && !check.HasDecodeAddEncode())
    throw BadOption("codec", codec,
                    fmt::format("kernel {} takes an element codec (casts, fp8, int8, int4, sign1)", o.kernel));
  return o;
}

// ---- data and timing --------------------------------------------------------------------------------

// Realistic gradients without zeros: normal (Irwin-Hall of four uniforms), or heavy-tailed
// (normal / sqrt(uniform): a power-law tail like the outliers of real gradients). Fast and parallel.
void FillGradients(std::vector<float>& g, uint64_t seed, bool heavy) {
  ParallelFor(g.size(), [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      uint64_t h = (seed + i) * 0x9E3779B97F4A7C15ull;
      auto next = [&h] {
        h ^= h >> 31;
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 29;
        return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
      };
      float x = (next() + next() + next() + next() - 2.0f) * 1.7320508f;
      if (heavy) x = x / std::sqrt(std::max(next(), 1e-6f));
      g[i] = 1e-3f * (x == 0.0f ? 1e-3f : x);
    }
  });
}

struct CodecTiming {
  bool device = false;
  void* stream = nullptr;
  int iters = 0;
};

// Median microseconds of fn over iterations (one warm-up).
double TimeUs(const CodecTiming& t, const std::function<void()>& fn) {
  fn();
  std::vector<double> samples;
  const int max_iters = t.iters ? t.iters : 50;
  double total = 0;
#if CIUIC_HAVE_CUDA
  std::unique_ptr<DeviceEventTimer> timer;
  if (t.device) timer = std::make_unique<DeviceEventTimer>(t.stream);
#endif
  for (int i = 0; i < max_iters; ++i) {
    double us;
    if (t.device) {
#if CIUIC_HAVE_CUDA
      timer->Start();
      fn();
      timer->Stop();
      us = timer->ElapsedUs();
#else
      us = 0;
#endif
    } else {
      const double t0 = NowSeconds();
      fn();
      us = (NowSeconds() - t0) * 1e6;
    }
    samples.push_back(us);
    total += us;
    if (!t.iters && i >= 2 && total > 3e5) break;
  }
  return Percentile(samples, 50);
}

double CodecCopyUs(const CodecTiming& t, void* dst, const void* src, size_t bytes) {
  return TimeUs(t, [&] {
    if (t.device) {
#if CIUIC_HAVE_CUDA
      CIUIC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(t.stream)));
#endif
    } else {
      std::memcpy(dst, src, bytes);
    }
  });
}

struct Errors {
  double rel_l2, max_abs;
};
Errors Compare(const std::vector<float>& x, const std::vector<float>& y) {
  double num = 0, den = 0, mx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(x[i]) - y[i];
    num += d * d;
    den += static_cast<double>(x[i]) * x[i];
    mx = std::max(mx, std::fabs(d));
  }
  return {den > 0 ? std::sqrt(num / den) : 0.0, mx};
}

std::string SizeLabel(uint64_t b) { return FormatSize(b); }

// ---- compress --------------------------------------------------------------------------------------

std::vector<Row> RunCompress(const CodecBenchOptions& o, const CodecTiming& tm) {
  std::vector<Row> rows;
  CodecSpec spec = o.spec;
  spec.error_feedback = o.ef;
  const Codec codec(spec);
  const MemoryKind kind = o.device ? MemoryKind::kDevice : MemoryKind::kHost;
  std::vector<bool> kinds;
  if (o.data != "heavy") kinds.push_back(false);
  if (o.data != "normal") kinds.push_back(true);
  for (uint64_t size : o.sizes) {
    const size_t n = size / 4, bytes = n * 4, wire_bytes = codec.WireBytes(n);
    for (bool heavy : kinds) {
      std::vector<float> host(n);
      FillGradients(host, o.spec.seed + size, heavy);
      Buffer x(bytes, kind), out(bytes, kind), acc(bytes, kind), wire(std::max<size_t>(wire_bytes, 1), kind);
      CopyBytes(x.data(), kind, host.data(), MemoryKind::kHost, bytes);
      SetBytes(acc.data(), kind, 0, bytes);
      CodecState st;
      const double copy_us = CodecCopyUs(tm, out.data(), x.data(), bytes);
      // One checked encode first: rejects NaN/Inf and sizes the state.
      codec.Encode(x.as<float>(), n, wire.data(), &st, tm.stream, true);
      const double enc_us = TimeUs(tm, [&] { codec.Encode(x.as<float>(), n, wire.data(), &st, tm.stream, false); });
      const uint64_t step = st.step - 1;
      const double dec_us = TimeUs(tm, [&] { codec.Decode(wire.data(), n, out.as<float>(), step, tm.stream); });
      const double acc_us =
          TimeUs(tm, [&] { codec.DecodeAccumulate(wire.data(), n, acc.as<float>(), step, tm.stream); });
      // Error of one encode of these gradients (no residual carried in).
      CodecState fresh;
      codec.Encode(x.as<float>(), n, wire.data(), &fresh, tm.stream, true);
      codec.Decode(wire.data(), n, out.as<float>(), 0, tm.stream);
      std::vector<float> back(n);
      CopyBytes(back.data(), MemoryKind::kHost, out.data(), kind, bytes);
      const Errors err = Compare(host, back);
      const double copy_gbps = bytes / copy_us / 1e3;
      const double ef_bytes = o.ef ? 8.0 * n : 0.0;
      auto gbps = [&](double us) { return bytes / us / 1e3; };
      auto traffic = [&](double moved, double us) { return moved / us / 1e3; };
      const double enc_t = traffic(bytes + wire_bytes + ef_bytes, enc_us);
      const double dec_t = traffic(wire_bytes + bytes, dec_us);
      const double acc_t = traffic(wire_bytes + 2.0 * bytes, acc_us);
      rows.push_back(Row{
          {"size", static_cast<int64_t>(bytes), 11},
          {"label", SizeLabel(bytes), 6},
          {"data", std::string(heavy ? "heavy" : "normal"), 6},
          {"codec", codec.Name(), 12},
          {"ratio", static_cast<double>(bytes) / std::max<size_t>(wire_bytes, 1), 6, 1},
          {"copy_gbps", copy_gbps, 9},
          {"enc_us", enc_us, 10, 1},
          {"enc_gbps", gbps(enc_us), 8},
          {"enc_pct_copy", 100 * gbps(enc_us) / copy_gbps, 12, 0},
          {"enc_pct_traffic", 100 * enc_t / (2 * copy_gbps), 15, 0},
          {"dec_us", dec_us, 10, 1},
          {"dec_gbps", gbps(dec_us), 8},
          {"dec_pct_copy", 100 * gbps(dec_us) / copy_gbps, 12, 0},
          {"dec_pct_traffic", 100 * dec_t / (2 * copy_gbps), 15, 0},
          {"acc_us", acc_us, 10, 1},
          {"acc_gbps", gbps(acc_us), 8},
          {"acc_pct_traffic", 100 * acc_t / (2 * copy_gbps), 15, 0},
          {"rel_l2_error", err.rel_l2, 12, 6},
          {"max_abs_error", err.max_abs, 13, 6},
      });
    }
  }
  return rows;
}

// ---- kernels ----------------------------------------------------------------------------------------

std::vector<Row> RunKernels(const CodecBenchOptions& o, const CodecTiming& tm) {
  std::vector<Row> rows;
  const MemoryKind kind = o.device ? MemoryKind::kDevice : MemoryKind::kHost;
  std::vector<std::string> names;
  if (o.kernel == "all") {
    for (const auto& k : kKernels) names.push_back(k[0]);
  } else {
    names.push_back(o.kernel);
  }
  CodecSpec spec = o.spec;
  spec.error_feedback = true;
  const Codec codec(spec);
  for (uint64_t size : o.sizes) {
    const size_t n = size / 4, bytes = n * 4;
    std::vector<float> host(n);
    FillGradients(host, o.spec.seed + size, false);
    Buffer x(bytes, kind), y(bytes, kind);
    CopyBytes(x.data(), kind, host.data(), MemoryKind::kHost, bytes);
    const double copy_us = CodecCopyUs(tm, y.data(), x.data(), bytes);
    const double copy_gbps = bytes / copy_us / 1e3;
    auto add = [&](const std::string& name, const std::string& what, double us, double moved) {
      rows.push_back(Row{
          {"size", static_cast<int64_t>(bytes), 11},
          {"label", SizeLabel(bytes), 6},
          {"kernel", name, 18},
          {"codec", what, 12},
          {"time_us", us, 10, 1},
          {"gbps", bytes / us / 1e3, 8},
          {"traffic_gbps", moved / us / 1e3, 12},
          {"copy_gbps", copy_gbps, 9},
          {"pct_copy", 100 * (bytes / us / 1e3) / copy_gbps, 8, 0},
          {"pct_traffic", 100 * (moved / us / 1e3) / (2 * copy_gbps), 11, 0},
      });
    };
    const bool element_codec = codec.HasDecodeAddEncode();
    for (const std::string& name : names) {
      if (TakesElementCodec(name) && !element_codec) continue;  // `all`: the parser refused a named one
      const size_t wb = element_codec ? codec.WireBytes(n) : 0;
      if (name == "ef-quantize") {
        Buffer wire(std::max<size_t>(wb, 1), kind);
        CodecState st;
        codec.Encode(x.as<float>(), n, wire.data(), &st, tm.stream, true);
        const double us = TimeUs(tm, [&] { codec.Encode(x.as<float>(), n, wire.data(), &st, tm.stream, false); });
        add(name, codec.Name(), us, bytes * 3.0 + wb);  // read grad + residual, write residual + wire
      } else if (name == "decode-accumulate") {
        Buffer wire(std::max<size_t>(wb, 1), kind);
        codec.Encode(x.as<float>(), n, wire.data(), nullptr, tm.stream, true);
        const double us = TimeUs(tm, [&] { codec.DecodeAccumulate(wire.data(), n, y.as<float>(), 0, tm.stream); });
        add(name, codec.Name(), us, wb + 2.0 * bytes);
      } else if (name == "decode-add-encode") {
        Buffer wire(std::max<size_t>(wb, 1), kind), wire2(std::max<size_t>(wb, 1), kind);
        codec.Encode(x.as<float>(), n, wire.data(), nullptr, tm.stream, true);
        const QuantArgs a = codec.Args(0);
        Buffer flag(4, kind);
        SetBytes(flag.data(), kind, 0, 4);
        const double us = TimeUs(tm, [&] {
          QuantDecodeAddEncode(a, wire.as<uint8_t>(), x.as<float>(), n, wire2.as<uint8_t>(), flag.as<uint32_t>(),
                               tm.stream);
        });
        add(name, codec.Name(), us, 2.0 * wb + bytes);
      } else if (name == "flatten") {
        // Tensors of uneven sizes (a geometric spread, like the layers of a model) summing to n.
        std::vector<size_t> counts(static_cast<size_t>(o.tensors));
        double wsum = 0;
        std::vector<double> w(counts.size());
        for (size_t t = 0; t < counts.size(); ++t) wsum += (w[t] = std::pow(1.03, static_cast<double>(t % 97)));
        size_t used = 0;
        for (size_t t = 0; t < counts.size(); ++t) {
          counts[t] = t + 1 == counts.size() ? n - used : static_cast<size_t>(static_cast<double>(n) * w[t] / wsum);
          used += counts[t];
        }
        std::vector<Buffer> bufs;
        std::vector<TensorRef> refs;
        for (size_t c : counts) {
          bufs.emplace_back(std::max<size_t>(c, 1) * 4, kind);
          refs.push_back({bufs.back().as<float>(), c});
        }
        const int count = static_cast<int>(refs.size());
        const double us_f = TimeUs(tm, [&] { FlattenTensors(refs.data(), count, y.as<float>(), tm.stream); });
        add("flatten", fmt::format("{} tensors", count), us_f, 2.0 * bytes);
        const double us_u = TimeUs(tm, [&] { UnflattenTensors(y.as<float>(), refs.data(), count, tm.stream); });
        add("unflatten", fmt::format("{} tensors", count), us_u, 2.0 * bytes);
      } else if (name == "unscale") {
        Buffer flag(4, kind), norm(8, kind);
        SetBytes(flag.data(), kind, 0, 4);
        // Unscaling by 1 keeps the data unchanged across iterations (the kernel still multiplies).
        const double us = TimeUs(
            tm, [&] { UnscaleCheckNorm(x.as<float>(), n, 1.0f, flag.as<uint32_t>(), norm.as<double>(), tm.stream); });
        add("unscale", "check+norm", us, 2.0 * bytes);
        if (o.clip) {
          const double us_c = TimeUs(tm, [&] { ScaleInPlace(x.as<float>(), n, 1.0f, tm.stream); });
          add("clip", "scale pass", us_c, 2.0 * bytes);
        }
      }
    }
  }
  return rows;
}

int RunCodecBench(int argc, char** argv) {
  const CodecBenchOptions o = ParseCodecBench(argc, argv);
  if (!o.out_path.empty()) CheckWritableOutput(o.out_path, "--out");
  for (uint64_t s : o.sizes) {
    const uint64_t need = s * 4;  // input, output, accumulator, wire
    const uint64_t have = o.device ? DeviceMemoryAvailable() : HostMemoryAvailable();
    if (need > have)
      throw BadOption("sizes", o.sizes_text,
                      fmt::format("size {} needs about {} B of {} memory, {} B available", FormatSize(s), need,
                                  o.device ? "device" : "host", have));
  }
  CodecTiming tm;
  tm.device = o.device;
  tm.iters = o.iters;
  SetParallelThreads(std::thread::hardware_concurrency());
  const std::string start = IsoNow();
  const std::vector<Row> rows = o.command == "compress" ? RunCompress(o, tm) : RunKernels(o, tm);

  std::string device_name = o.device ? CudaDeviceName() : "cpu (one core)";
  std::string command_line;
  for (const auto& a : o.argv) command_line += (command_line.empty() ? "" : " ") + a;
  std::string text;
  if (o.format == "csv") {
    text = CsvText(rows);
  } else if (o.format == "json") {
    nlohmann::json j;
    j["schema"] = o.command == "compress" ? "ciuic.compress/1" : "ciuic.kernel/1";
    j["context"] = {{"tool", "ciuic-bench"},
                    {"tool_version", CIUIC_VERSION},
                    {"git_commit", CIUIC_GIT_COMMIT},
                    {"command", o.command},
                    {"kernel", o.kernel},
                    {"device", o.device ? "cuda" : "cpu"},
                    {"device_name", device_name},
                    {"codec", CodecName(o.spec)},
                    {"block", o.spec.block},
                    {"rounding", RoundingName(o.spec.rounding)},
                    {"error_feedback", o.command == "compress" ? o.ef : true},
                    {"start_time", start},
                    {"command_line", command_line},
                    {"copy_baseline", o.device ? "cudaMemcpy D2D" : "memcpy, one core"}};
    j["results"] = JsonRows(rows);
    text = j.dump(2) + "\n";
  }
  if (o.format == "table" || !o.out_path.empty()) {
    std::cout << fmt::format(
        "# ciuic-bench {}{}  device {}  codec {}  block {}  rounding {}{}\n", o.command,
        o.kernel.empty() ? "" : " " + o.kernel, device_name, CodecName(o.spec), o.spec.block,
        RoundingName(o.spec.rounding),
        o.spec.kind == CodecKind::kTopK
            ? std::string("  select ") + (o.spec.select == TopKSelect::kExact ? "exact" : "sampled")
            : "");
    std::cout << fmt::format("# ciuic {} ({})  started {}  copy baseline: {}\n", CIUIC_VERSION, CIUIC_GIT_COMMIT, start,
                             o.device ? "cudaMemcpy device-to-device, CUDA events" : "single-core memcpy, host clock");
    std::cout << TableText(rows);
    std::cout << "# GB/s = fp32 gradient bytes / median time; traffic = bytes read + written; pct_copy = GB/s / copy "
                 "bytes/s; pct_traffic = traffic / copy read+write bytes/s\n";
  }
  if (!o.out_path.empty()) {
    WriteFileAtomically(o.out_path, o.format == "table" ? TableText(rows) : text);
    LogInfo("wrote {}", o.out_path);
  } else if (o.format != "table") {
    std::cout << text;
  }
  return 0;
}

}  // namespace

int CodecBenchMain(int argc, char** argv) { return RunCodecBench(argc, argv); }

}  // namespace ciuic
