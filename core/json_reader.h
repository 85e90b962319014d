#pragma once
// One strict reader for the JSON files ciuic reads (profiles, topologies, workloads). Every value
// is checked for its type and range where it is read, and every refusal is one InputError in one
// format, "ORIGIN: PATH: PROBLEM", PATH being the JSON path from the document's root name:
//   `a.profile.json: profile.rules[2].bucket_bytes: -5 is not a positive size`.
// The JSON library's own exception text never reaches the user.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

namespace ciuic {

// Arrays and objects nested deeper are refused ("PATH: nested more than 64 levels deep"): our files
// need fewer than 8 levels, and a deeper document costs stack in every recursive walk of it.
constexpr size_t kMaxJsonDepth = 64;
static_assert(kMaxJsonDepth > 2, "the refusal names the path down to the third level");

class JsonValue {
 public:
  const std::string& path() const { return path_; }
  // Throws InputError("ORIGIN: PATH: problem").
  [[noreturn]] void Fail(const std::string& problem) const;
  // The value as the file spells it (shortened), for messages.
  std::string Text() const;

  bool IsNull() const;
  bool Has(const std::string& key) const;                          // an object with that member
  JsonValue operator[](const std::string& key) const;              // the member; refused when missing
  std::vector<JsonValue> Elements() const;                         // an array's items, paths `[i]`
  std::vector<std::pair<std::string, JsonValue>> Members() const;  // an object's members
  void OnlyKeys(std::initializer_list<const char*> keys) const;    // an object with no other member

  std::string String() const;          // a string
  std::string NonEmptyString() const;  // a string with at least one character
  std::string OneOf(std::initializer_list<const char*> values) const;
  bool Bool() const;
  double Number(double lo, double hi) const;      // a finite number in lo..hi
  int64_t Integer(int64_t lo, int64_t hi) const;  // a whole number in lo..hi
  uint64_t Unsigned(uint64_t lo,
                    uint64_t hi) const;           // a whole number in lo..hi (full uint64 range)
  uint64_t Size(uint64_t lo, uint64_t hi) const;  // a byte count in lo..hi

 private:
  friend class JsonDocument;
  JsonValue(const nlohmann::json* j, std::string path, const std::string* origin)
      : j_(j), path_(std::move(path)), origin_(origin) {}
  const char* TypeName() const;
  void Require(bool ok, const char* what) const;
  const nlohmann::json* j_;
  std::string path_;
  const std::string* origin_;
};

class JsonDocument {
 public:
  // Parses `text`; "ORIGIN: not valid JSON (... at byte N)" when it is not, "ORIGIN: PATH: given
  // twice" for a repeated key and "ORIGIN: PATH...: nested more than N levels deep" past
  // kMaxJsonDepth. `root` names the top value in paths ("profile", "topology", "workload").
  JsonDocument(const std::string& text, std::string root, std::string origin);
  ~JsonDocument();
  JsonDocument(const JsonDocument&) = delete;
  JsonDocument& operator=(const JsonDocument&) = delete;
  // The top value, required to be an object.
  JsonValue Root() const;

 private:
  std::unique_ptr<nlohmann::json> json_;
  std::string root_, origin_;
};

// Reads a whole regular file; InputError "cannot read WHAT 'PATH': WHY" when it cannot or when PATH is
// not a regular file (a FIFO is refused without waiting for a writer).
std::string ReadTextFile(const std::string& path, const std::string& what);

}  // namespace ciuic
