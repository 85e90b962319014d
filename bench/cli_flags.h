#pragma once
// ciuic-bench's sweep options with nccl-tests' and OSU's flags mapped onto ours (bench/cli_flags.cc),
// and the small parsing helpers the rest of the command line (bench/cli_options.cc) shares with it.
//
// Each setting may come from our long option and from nccl-tests' or OSU's short flag; every source
// given is parsed on its own and they must agree ("--iters 20 and -n 50 disagree"). Clashes between the
// two tools' letters are resolved one way and said so: -i is OSU's iterations (nccl-tests' step bytes
// are --stepbytes), -m is OSU's message sizes (nccl-tests' aggregation is not offered), -T is OSU's
// datatype (nccl-tests' timeout is --timeout).

#include <cxxopts.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "bench/cli_args.h"
#include "bench/cli_options.h"
#include "core/error.h"
#include "core/files.h"

namespace ciuic {

template <class T>
T Get(const cxxopts::ParseResult& r, const char* key) {
  return r[key].as<T>();
}

// Limits of the counts on the command line: --ranks (and so --root), and iteration counts (1e7
// iterations of the smallest message already take minutes).
constexpr int kMaxRanks = 4096;
constexpr int kMaxIterations = 10'000'000;

// Parses option `key`'s text with `parse`, naming the option in a refusal: "--KEY TEXT: why".
template <class F>
auto Named(const cxxopts::ParseResult& r, const char* key, F parse) {
  const std::string text = Get<std::string>(r, key);
  try {
    return parse(text);
  } catch (const Error& e) {
    throw BadOption(key, text, e.what());
  }
}

// "FLAG VALUE: problem", the value quoted when empty.
UsageError BadFlag(std::string_view flag, std::string_view value, std::string_view problem);

// One setting and the options that gave it, in the order they were added (the long option first).
template <class T>
class Setting {
 public:
  void Add(std::string flag, std::string text, T value) {
    if (given_ && !(value == value_))
      throw UsageError(fmt::format("{} {} and {} {} disagree (both set the same thing): give one", flag_,
                                   PrintableLine(text_), flag, PrintableLine(text)));
    if (!given_) {
      flag_ = std::move(flag);
      text_ = std::move(text);
      value_ = std::move(value);
      given_ = true;
    }
  }
  bool given() const { return given_; }
  const T& value() const { return value_; }
  const std::string& text() const { return text_; }

 private:
  bool given_ = false;
  std::string flag_, text_;
  T value_{};
};

// A short flag's whole number in lo..hi.
int WholeFlag(std::string_view flag, const std::string& text, int lo, int hi);

// Whether `text` is a number as strtod reads it, with nothing left over.
bool IsNumber(const std::string& text);

// After the collective (cli.bench.spec) is known: its sizes (--sizes, nccl-tests' -b/-e/-f/--stepbytes,
// OSU's -m), dtype(s), op(s), root, iteration counts (with -n/-w/-c, OSU's -i/-x), --average/-a,
// --inplace and --seed; any two sources of one setting must agree.
void ParseSweepFlags(const cxxopts::ParseResult& r, Cli& cli);

}  // namespace ciuic
