#include "core/json_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/files.h"
#include "core/sizes.h"

namespace ciuic {

namespace {

using nlohmann::json;

bool PlainKey(const std::string& key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string MemberPath(const std::string& parent, const std::string& key) {
  if (PlainKey(key)) return parent + "." + key;
  return parent + "[" + json(key).dump(-1, ' ', false, json::error_handler_t::replace) + "]";
}

// Exact as doubles: the first whole numbers outside int64_t and uint64_t.
constexpr double kTwoTo63 = 9223372036854775808.0;
constexpr double kTwoTo64 = 18446744073709551616.0;

// A file name for a one-line message: control characters (a newline) as '?', and whole up to
// PATH_MAX, since the part that names the file is at its end.
std::string ShownPath(const std::string& path) { return PrintableLine(path, 4096); }

std::string NotRegularFile(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory, not a regular file";
  if (S_ISFIFO(mode)) return "a FIFO, not a regular file";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device, not a regular file";
  if (S_ISSOCK(mode)) return "a socket, not a regular file";
  return "not a regular file";
}

std::string SizeText(uint64_t bytes) {
  const std::string short_form = FormatSize(bytes);
  return short_form == std::to_string(bytes) ? short_form : fmt::format("{} ({})", bytes, short_form);
}

}  // namespace

void JsonValue::Fail(const std::string& problem) const {
  throw InputError(fmt::format("{}: {}: {}", *origin_, path_, problem));
}

std::string JsonValue::Text() const {
  std::string s = j_->dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

const char* JsonValue::TypeName() const {
  switch (j_->type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    default:
      return "a number";
  }
}

void JsonValue::Require(bool ok, const char* what) const {
  if (!ok) Fail(fmt::format("{} is {}, not {}", Text(), TypeName(), what));
}

bool JsonValue::IsNull() const { return j_->is_null(); }

bool JsonValue::Has(const std::string& key) const { return j_->is_object() && j_->contains(key); }

JsonValue JsonValue::operator[](const std::string& key) const {
  Require(j_->is_object(), "an object");
  const auto it = j_->find(key);
  const std::string path = MemberPath(path_, key);
  if (it == j_->end()) throw InputError(fmt::format("{}: {}: required but missing", *origin_, path));
  return JsonValue(&*it, path, origin_);
}

std::vector<JsonValue> JsonValue::Elements() const {
  Require(j_->is_array(), "an array");
  std::vector<JsonValue> out;
  for (size_t i = 0; i < j_->size(); ++i) out.push_back(JsonValue(&(*j_)[i], fmt::format("{}[{}]", path_, i), origin_));
  return out;
}

std::vector<std::pair<std::string, JsonValue>> JsonValue::Members() const {
  Require(j_->is_object(), "an object");
  std::vector<std::pair<std::string, JsonValue>> out;
  for (auto it = j_->begin(); it != j_->end(); ++it)
    out.emplace_back(it.key(), JsonValue(&it.value(), MemberPath(path_, it.key()), origin_));
  return out;
}

void JsonValue::OnlyKeys(std::initializer_list<const char*> keys) const {
  Require(j_->is_object(), "an object");
  for (auto it = j_->begin(); it != j_->end(); ++it) {
    if (std::find_if(keys.begin(), keys.end(), [&](const char* k) { return it.key() == k; }) != keys.end()) continue;
    std::string known;
    for (const char* k : keys) {
      if (!known.empty()) known += ' ';
      known += k;
    }
    throw InputError(fmt::format("{}: {}: unknown key (known: {})", *origin_, MemberPath(path_, it.key()), known));
  }
}

std::string JsonValue::String() const {
  Require(j_->is_string(), "a string");
  return j_->get<std::string>();
}

std::string JsonValue::NonEmptyString() const {
  std::string s = String();
  if (s.empty()) Fail("an empty string is not allowed here");
  return s;
}

std::string JsonValue::OneOf(std::initializer_list<const char*> values) const {
  const std::string s = String();
  std::string known;
  for (const char* v : values) {
    if (s == v) return s;
    if (!known.empty()) known += ' ';
    known += v;
  }
  Fail(fmt::format("{} is not one of {}", Text(), known));
}

bool JsonValue::Bool() const {
  Require(j_->is_boolean(), "true or false");
  return j_->get<bool>();
}

double JsonValue::Number(double lo, double hi) const {
  Require(j_->is_number(), "a number");
  const double x = j_->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) Fail(fmt::format("{} is not in {}..{}", Text(), lo, hi));
  return x;
}

int64_t JsonValue::Integer(int64_t lo, int64_t hi) const {
  Require(j_->is_number(), "a whole number");
  if (j_->is_number_unsigned()) {
    const uint64_t u = j_->get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi) || static_cast<int64_t>(u) < lo)
      Fail(fmt::format("{} is not in {}..{}", Text(), lo, hi));
    return static_cast<int64_t>(u);
  }
  if (j_->is_number_integer()) {
    const int64_t v = j_->get<int64_t>();
    if (v < lo || v > hi) Fail(fmt::format("{} is not in {}..{}", Text(), lo, hi));
    return v;
  }
  const double d = j_->get<double>();
  if (!std::isfinite(d) || d != std::floor(d)) Fail(fmt::format("{} is not a whole number", Text()));
  // Compared as integers: INT64_MAX as a double rounds up to 2^63, which no int64_t holds.
  if (d < -kTwoTo63 || d >= kTwoTo63) Fail(fmt::format("{} is not in {}..{}", Text(), lo, hi));
  const int64_t v = static_cast<int64_t>(d);
  if (v < lo || v > hi) Fail(fmt::format("{} is not in {}..{}", Text(), lo, hi));
  return v;
}

uint64_t JsonValue::Unsigned(uint64_t lo, uint64_t hi) const {
  Require(j_->is_number(), "a whole number");
  if (j_->is_number_unsigned()) {
    const uint64_t u = j_->get<uint64_t>();
    if (u < lo || u > hi) Fail(fmt::format("{} is not in {}..{}", Text(), lo, hi));
    return u;
  }
  if (j_->is_number_integer()) Fail(fmt::format("{} is not in {}..{}", Text(), lo, hi));  // negative
  const double d = j_->get<double>();
  if (!std::isfinite(d) || d != std::floor(d)) Fail(fmt::format("{} is not a whole number", Text()));
  // Compared as integers: UINT64_MAX as a double rounds up to 2^64, which no uint64_t holds (an
  // integer literal too large for uint64_t is read as that double too).
  if (d < 0 || d >= kTwoTo64) Fail(fmt::format("{} is not in {}..{}", Text(), lo, hi));
  const uint64_t u = static_cast<uint64_t>(d);
  if (u < lo || u > hi) Fail(fmt::format("{} is not in {}..{}", Text(), lo, hi));
  return u;
}

uint64_t JsonValue::Size(uint64_t lo, uint64_t hi) const {
  Require(j_->is_number(), "a size in bytes");
  bool negative = false, whole = true, beyond = false;
  uint64_t v = 0;
  if (j_->is_number_unsigned()) {
    v = j_->get<uint64_t>();
  } else if (j_->is_number_integer()) {
    negative = j_->get<int64_t>() < 0;
    v = negative ? 0 : static_cast<uint64_t>(j_->get<int64_t>());
  } else {
    const double d = j_->get<double>();
    whole = std::isfinite(d) && d == std::floor(d);
    negative = d < 0;
    beyond = whole && d >= kTwoTo64;
    v = !whole || negative || beyond ? 0 : static_cast<uint64_t>(d);
  }
  if (!whole) Fail(fmt::format("{} is not a whole number of bytes", Text()));
  if (negative || (v == 0 && lo > 0 && !beyond))
    Fail(lo > 0 ? fmt::format("{} is not a positive size", Text())
                : fmt::format("{} is not a size (a byte count >= 0)", Text()));
  if (beyond || v > hi) Fail(fmt::format("{} is above the largest allowed size, {}", Text(), SizeText(hi)));
  if (v < lo) Fail(fmt::format("{} is below the smallest allowed size, {}", Text(), SizeText(lo)));
  return v;
}

JsonDocument::JsonDocument(const std::string& text, std::string root, std::string origin)
    : json_(std::make_unique<json>()), root_(std::move(root)), origin_(ShownPath(origin)) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw InputError(fmt::format("{}: not valid JSON (the file is empty)", origin_));
  // The parser's callback sees every value as it starts, with the JSON path rebuilt alongside: a
  // key given twice (which nlohmann would resolve silently, the last one winning) and nesting
  // deeper than any file of ours are refused there, before the value is built.
  struct Frame {
    std::string path;
    bool array = false;
    size_t next_index = 0;
    std::string key;  // the member whose value comes next
    std::set<std::string> keys;
  };
  std::vector<Frame> frames;
  auto value_path = [&]() -> std::string {
    if (frames.empty()) return root_;
    Frame& f = frames.back();
    return f.array ? fmt::format("{}[{}]", f.path, f.next_index++) : MemberPath(f.path, f.key);
  };
  const json::parser_callback_t check = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start: {
        std::string path = value_path();
        if (frames.size() >= kMaxJsonDepth) {
          // The path down to the third level names where it happens without a kilobyte of "[0]".
          throw InputError(
              fmt::format("{}: {}...: nested more than {} levels deep", origin_, frames[2].path, kMaxJsonDepth));
        }
        Frame& f = frames.emplace_back();
        f.path = std::move(path);
        f.array = event == json::parse_event_t::array_start;
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames.pop_back();
        break;
      case json::parse_event_t::key: {
        Frame& f = frames.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second)
          throw InputError(fmt::format("{}: {}: given twice (a key may appear once per object)", origin_,
                                       MemberPath(f.path, f.key)));
        break;
      }
      case json::parse_event_t::value:
        if (!frames.empty() && frames.back().array) ++frames.back().next_index;
        break;
    }
    return true;
  };
  try {
    *json_ = json::parse(text, check);
  } catch (const json::parse_error& e) {
    throw InputError(fmt::format("{}: not valid JSON (syntax error at byte {})", origin_, e.byte));
  } catch (const json::exception&) {
    throw InputError(fmt::format("{}: not valid JSON", origin_));
  }
}

JsonDocument::~JsonDocument() = default;

JsonValue JsonDocument::Root() const {
  JsonValue v(json_.get(), root_, &origin_);
  v.Require(json_->is_object(), "an object");
  return v;
}

std::string ReadTextFile(const std::string& path, const std::string& what) {
  const std::string shown = ShownPath(path);
  auto refuse = [&](const std::string& why) {
    throw InputError(fmt::format("cannot read {} '{}': {}", what, shown, why));
  };
  // A FIFO would block the open (no writer) or the read (a writer that never closes), and a device
  // may never end: only a regular file is read. Checked before opening and again on the open file,
  // which O_NONBLOCK keeps from waiting should the path have been replaced by a FIFO in between.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) refuse(std::strerror(errno));
  if (!S_ISREG(st.st_mode)) refuse(NotRegularFile(st.st_mode));
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) refuse(std::strerror(errno));
  std::string text;
  int error = 0;
  if (::fstat(fd, &st) != 0) {
    error = errno;
  } else if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    refuse(NotRegularFile(st.st_mode));
  } else {
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0) {
        text.append(buf, static_cast<size_t>(n));
      } else if (n == 0) {
        break;
      } else if (errno != EINTR) {
        error = errno;
        break;
      }
    }
  }
  ::close(fd);
  if (error != 0) refuse(std::strerror(error));
  return text;
}

}  // namespace ciuic
