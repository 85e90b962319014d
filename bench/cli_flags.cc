#include "bench/cli_flags.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <vector>

#include "bench/coll_spec.h"
#include "bench/runner.h"
#include "core/dtype.h"
#include "core/reduce_op.h"
#include "core/sizes.h"

namespace ciuic {

UsageError BadFlag(std::string_view flag, std::string_view value, std::string_view problem) {
  return UsageError(
      fmt::format("{} {}: {}", flag, value.empty() ? "''" : PrintableLine(value), PrintableLine(problem, 1000)));
}

// A short flag's whole number in lo..hi.
int WholeFlag(std::string_view flag, const std::string& text, int lo, int hi) {
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    throw BadFlag(
        flag, text,
        ec == std::errc::result_out_of_range ? fmt::format("must be in {}..{}", lo, hi) : "not a whole number");
  if (v < lo || v > hi) throw BadFlag(flag, text, fmt::format("must be in {}..{}", lo, hi));
  return v;
}

bool IsNumber(const std::string& text) {
  char* end = nullptr;
  std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size();
}

namespace {

// Each item of a comma list parsed by `parse`; an empty or repeated item is refused.
template <class T, class F>
std::vector<T> ListOf(std::string_view flag, const std::string& text, F parse) {
  std::vector<T> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) throw BadFlag(flag, text, "an empty item in the list");
    T v;
    try {
      v = parse(item);
    } catch (const Error& e) {
      throw BadFlag(flag, text, e.what());
    }
    if (std::find(out.begin(), out.end(), v) != out.end())
      throw BadFlag(flag, text, fmt::format("'{}' is given twice", item));
    out.push_back(v);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

// --dtype / -d: ours or nccl-tests' names (float half bfloat16 double int8 uint8 int32 int64 ...), a
// comma list of them, or all.
std::vector<DType> DTypesOf(std::string_view flag, const std::string& text) {
  if (text == "all") return AllDTypes();
  return ListOf<DType>(flag, text, [](const std::string& v) { return ParseDType(v); });
}

// -T: OSU's type names (MPI's), or all (OSU's three: mpi_char, mpi_int, mpi_float).
std::vector<DType> OsuDTypesOf(const std::string& text) {
  static const std::pair<const char*, DType> kOsu[] = {
      {"mpi_char", DType::kInt8},     {"mpi_signed_char", DType::kInt8}, {"mpi_unsigned_char", DType::kUInt8},
      {"mpi_int", DType::kInt32},     {"mpi_float", DType::kFloat32},    {"mpi_double", DType::kFloat64},
      {"mpi_int8_t", DType::kInt8},   {"mpi_uint8_t", DType::kUInt8},    {"mpi_int32_t", DType::kInt32},
      {"mpi_int64_t", DType::kInt64}, {"mpi_long_long", DType::kInt64},
  };
  std::string lower = text;
  for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower == "all") return {DType::kInt8, DType::kInt32, DType::kFloat32};
  for (const auto& [name, t] : kOsu)
    if (lower == name) return {t};
  if (IsNumber(text))
    throw BadFlag("-T", text, fmt::format("-T is OSU's datatype here; nccl-tests' timeout is --timeout {}", text));
  std::string known;
  for (const auto& [name, t] : kOsu) known += fmt::format("{}{}", known.empty() ? "" : ", ", name);
  throw BadFlag("-T", text, fmt::format("unknown OSU datatype (known: {}, all)", known));
}

// --op / -o: sum prod max min avg, a comma list of them, or all (nccl-tests' order).
std::vector<ReduceOp> OpsOf(std::string_view flag, const std::string& text) {
  if (text == "all") return {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};
  return ListOf<ReduceOp>(flag, text, [](const std::string& v) { return ParseReduceOp(v); });
}

// -a: nccl-tests' 0=rank0 1=avg 2=min 3=max, or our words.
Average AverageOf(std::string_view flag, const std::string& text) {
  static const Average kByNumber[] = {Average::kRank0, Average::kAvg, Average::kMin, Average::kMax};
  if (text.size() == 1 && text[0] >= '0' && text[0] <= '3') return kByNumber[text[0] - '0'];
  try {
    return ParseAverage(text);
  } catch (const Error&) {
    throw BadFlag(flag, text, "use 0 (rank 0), 1 (avg), 2 (min), 3 (max) or avg, max, min, rank0");
  }
}

std::vector<uint64_t> SizesOf(std::string_view flag, const std::string& shown, const std::string& spec) {
  try {
    return ParseSizeList(spec);
  } catch (const Error& e) {
    throw BadFlag(flag, shown, e.what());
  }
}

// The sizes: --sizes, nccl-tests' -b/-e with -f or --stepbytes, or OSU's -m; any two must agree.
std::vector<uint64_t> ParseSweepSizes(const cxxopts::ParseResult& r, Cli& cli, const std::vector<DType>& types) {
  Setting<std::vector<uint64_t>> sizes;
  if (r.count("sizes")) {
    const std::string text = Get<std::string>(r, "sizes");
    sizes.Add("--sizes", text, Named(r, "sizes", [](const std::string& v) { return ParseSizeList(v); }));
  }
  const bool nccl = r.count("b") || r.count("e") || r.count("f") || r.count("stepbytes");
  if (nccl) {
    if (r.count("f") && r.count("stepbytes"))
      throw UsageError("-f and --stepbytes: nccl-tests steps by a factor or by bytes, not both: give one");
    if (r.count("i"))
      throw BadFlag("-i", Get<std::string>(r, "i"),
                    "beside -b/-e/-f it is ambiguous (nccl-tests: step bytes, OSU: iterations): write --stepbytes "
                    "SIZE or -n/--iters N");
    if (r.count("m"))
      throw BadFlag("-m", Get<std::string>(r, "m"),
                    "-m is OSU's message sizes here, beside nccl-tests' -b/-e/-f (nccl-tests' -m, aggregated "
                    "iterations, is not offered): give one of them");
    // nccl-tests' defaults: 32M for a bound not given, steps of 1M without -f.
    const std::string lo = r.count("b") ? Get<std::string>(r, "b") : "32M";
    const std::string hi = r.count("e") ? Get<std::string>(r, "e") : "32M";
    const std::string step = r.count("f") ? "x" + Get<std::string>(r, "f")
                                          : "+" + (r.count("stepbytes") ? Get<std::string>(r, "stepbytes") : "1M");
    std::string shown;
    if (r.count("b")) shown += "-b " + lo;
    if (r.count("e")) shown += std::string(shown.empty() ? "" : " ") + "-e " + hi;
    if (r.count("f")) shown += std::string(shown.empty() ? "" : " ") + "-f " + step.substr(1);
    if (r.count("stepbytes")) shown += std::string(shown.empty() ? "" : " ") + "--stepbytes " + step.substr(1);
    const std::string spec = fmt::format("{}:{}:{}", lo, hi, step);
    const auto space = shown.find(' ');
    sizes.Add(shown.substr(0, space), shown.substr(space + 1),
              SizesOf(shown.substr(0, space), shown.substr(space + 1), spec));
    cli.sizes_text = spec;
  }
  if (r.count("m")) {
    const std::string text = Get<std::string>(r, "m");
    std::string spec;
    if (text.find(':') != std::string::npos) {
      if (text.back() == ':' || text.front() == ':') throw BadFlag("-m", text, "use -m MIN:MAX or -m MAX");
      spec = text + ":x2";
    } else {
      // -m MAX: from one element of the largest dtype of the sweep, doubling (OSU's sizes).
      size_t es = 1;
      for (DType t : types) es = std::max(es, DTypeSize(t));
      spec = fmt::format("{}:{}:x2", es, text);
    }
    sizes.Add("-m", text, SizesOf("-m", text, spec));
    cli.sizes_text = spec;
  }
  if (!sizes.given()) {
    cli.sizes_text = Get<std::string>(r, "sizes");  // the default
    return Named(r, "sizes", [](const std::string& v) { return ParseSizeList(v); });
  }
  if (r.count("sizes")) cli.sizes_text = sizes.text();
  return sizes.value();
}

}  // namespace

void ParseSweepFlags(const cxxopts::ParseResult& r, Cli& cli) {
  BenchOptions& b = cli.bench;
  const CollSpec* spec = b.spec;
  Setting<std::vector<DType>> types;
  if (r.count("dtype"))
    types.Add("--dtype", Get<std::string>(r, "dtype"), DTypesOf("--dtype", Get<std::string>(r, "dtype")));
  if (r.count("d")) types.Add("-d", Get<std::string>(r, "d"), DTypesOf("-d", Get<std::string>(r, "d")));
  if (r.count("T")) types.Add("-T", Get<std::string>(r, "T"), OsuDTypesOf(Get<std::string>(r, "T")));
  b.types = types.given() ? types.value() : std::vector<DType>{DType::kFloat32};
  b.type = b.types.front();
  b.sizes = ParseSweepSizes(r, cli, b.types);
  // A size below one element would run rows of nothing and report them as skipped.
  for (DType t : b.types) {
    const size_t es = DTypeSize(t);
    for (uint64_t size : b.sizes) {
      if (size < es)
        throw BadOption("sizes", cli.sizes_text,
                        fmt::format("{} B is smaller than one {} element ({} B)", size, DTypeName(t), es));
    }
  }
  Setting<std::vector<ReduceOp>> ops;
  if (r.count("op")) ops.Add("--op", Get<std::string>(r, "op"), OpsOf("--op", Get<std::string>(r, "op")));
  if (r.count("o")) ops.Add("-o", Get<std::string>(r, "o"), OpsOf("-o", Get<std::string>(r, "o")));
  b.ops = ops.given() ? ops.value() : std::vector<ReduceOp>{ReduceOp::kSum};
  b.op = b.ops.front();
  b.root = OptionInRange("root", Get<int>(r, "root"), 0, kMaxRanks - 1);
  if (r.count("root") && !spec->rooted)
    throw BadOption("root", std::to_string(b.root),
                    fmt::format("{} has no root (broadcast and reduce have one)", spec->name));

  Setting<int> iters, warmup, check;
  if (r.count("iters"))
    iters.Add("--iters", std::to_string(Get<int>(r, "iters")),
              OptionInRange("iters", Get<int>(r, "iters"), 1, kMaxIterations));
  if (r.count("n"))
    iters.Add("-n", Get<std::string>(r, "n"), WholeFlag("-n", Get<std::string>(r, "n"), 1, kMaxIterations));
  if (r.count("i")) {
    const std::string text = Get<std::string>(r, "i");
    if (!text.empty() && !IsNumber(text))
      throw BadFlag("-i", text,
                    fmt::format("-i is OSU's iteration count here; nccl-tests' step bytes: --stepbytes {}", text));
    iters.Add("-i", text, WholeFlag("-i", text, 1, kMaxIterations));
  }
  if (iters.given()) b.iters = iters.value();
  if (r.count("warmup"))
    warmup.Add("--warmup", std::to_string(Get<int>(r, "warmup")),
               OptionInRange("warmup", Get<int>(r, "warmup"), 0, kMaxIterations));
  if (r.count("w"))
    warmup.Add("-w", Get<std::string>(r, "w"), WholeFlag("-w", Get<std::string>(r, "w"), 0, kMaxIterations));
  if (r.count("x"))
    warmup.Add("-x", Get<std::string>(r, "x"), WholeFlag("-x", Get<std::string>(r, "x"), 0, kMaxIterations));
  if (warmup.given()) b.warmup = warmup.value();
  if (r.count("check"))
    check.Add("--check", std::to_string(Get<int>(r, "check")),
              OptionInRange("check", Get<int>(r, "check"), 0, kMaxIterations));
  if (r.count("c"))
    check.Add("-c", Get<std::string>(r, "c"), WholeFlag("-c", Get<std::string>(r, "c"), 0, kMaxIterations));
  b.check = check.given() ? check.value() : OptionInRange("check", Get<int>(r, "check"), 0, kMaxIterations);
  Setting<Average> average;
  if (r.count("average"))
    average.Add("--average", Get<std::string>(r, "average"),
                Named(r, "average", [](const std::string& v) { return ParseAverage(v); }));
  if (r.count("a")) average.Add("-a", Get<std::string>(r, "a"), AverageOf("-a", Get<std::string>(r, "a")));
  b.average =
      average.given() ? average.value() : Named(r, "average", [](const std::string& v) { return ParseAverage(v); });
  const std::string inplace = Get<std::string>(r, "inplace");
  if (inplace == "yes") {
    b.out_of_place = false;
  } else if (inplace == "no") {
    b.in_place = false;
  } else if (inplace != "both") {
    throw UsageError(fmt::format("bad --inplace '{}': use yes, no or both", inplace));
  }
  b.seed = Get<uint64_t>(r, "seed");
}

}  // namespace ciuic
