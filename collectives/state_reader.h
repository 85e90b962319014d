#pragma once
// The one bounded reader of the runtime's state formats (a rank's state file, the profile runtime's
// file of several configurations, the C API's codec-state bytes): every read is held to the bytes
// left first, so no length field can make a reader allocate or read past the end; failures throw
// InputError "<prefix>: <what>" naming the field and its offset.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <istream>
#include <streambuf>
#include <string>
#include <string_view>

#include "core/error.h"

namespace ciuic {

// The checksum that closes each state record of format 2 on: FNV-1a's step over 8-byte little-endian
// words (one multiply per word, several GB/s), the last partial word zero-padded, then the length;
// fed in any pieces, the result depends on the bytes only. It guards against damage (a flipped bit,
// a torn or overwritten block), not against someone forging a file.
class StateChecksum {
 public:
  void Add(const void* data, uint64_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    total_ += bytes;
    while (bytes > 0 && fill_ > 0 && fill_ < 8) {  // finish a word begun by an earlier piece
      word_ |= static_cast<uint64_t>(*p++) << (8 * fill_++);
      --bytes;
    }
    if (fill_ == 8) Mix();
    for (; bytes >= 8; bytes -= 8, p += 8) {
      uint64_t w = 0;
      for (int i = 0; i < 8; ++i) w |= static_cast<uint64_t>(p[i]) << (8 * i);
      word_ = w;
      Mix();
    }
    for (; bytes > 0; --bytes) word_ |= static_cast<uint64_t>(*p++) << (8 * fill_++);
  }
  uint64_t value() const {
    uint64_t h = h_;
    if (fill_ > 0) h = (h ^ word_) * kPrime;
    return (h ^ total_) * kPrime;
  }

 private:
  static constexpr uint64_t kPrime = 0x100000001b3ull;
  void Mix() {
    h_ = (h_ ^ word_) * kPrime;
    h_ ^= h_ >> 29;  // carries the high bits down, so every bit of a word reaches the next multiply
    word_ = 0;
    fill_ = 0;
  }
  uint64_t h_ = 0xcbf29ce484222325ull, word_ = 0, total_ = 0;
  int fill_ = 0;
};

class BoundedReader {
 public:
  BoundedReader(std::istream& in, uint64_t size, std::string prefix)
      : in_(in), size_(size), prefix_(std::move(prefix)) {}

  uint64_t left() const { return size_ - pos_; }
  [[noreturn]] void Fail(const std::string& what) const { throw InputError(prefix_ + ": " + what); }
  void Read(void* dst, uint64_t bytes, std::string_view field) {
    if (bytes > left())
      Fail(fmt::format("truncated: {} needs {} bytes at offset {}, {} are left", field, bytes, pos_, left()));
    in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(bytes));
    if (!in_) Fail(fmt::format("read error in {} at offset {}", field, pos_));
    sum_.Add(dst, bytes);
    pos_ += bytes;
  }
  // Format 2 on: the u64 checksum stored after what this reader has read, compared with those bytes'
  // (a file damaged anywhere before it is refused, not loaded with other values).
  void CheckChecksum(std::string_view what) {
    const uint64_t computed = sum_.value();
    const auto stored = Get<uint64_t>("checksum");
    if (stored != computed)
      Fail(fmt::format("checksum mismatch at offset {}: {} is damaged (stored {:016x}, the bytes give {:016x})",
                       pos_ - 8, what, stored, computed));
  }
  template <class T>
  T Get(std::string_view field) {
    T v{};
    Read(&v, sizeof v, field);
    return v;
  }
  // A u64 length (at most `max`) and that many bytes.
  std::string String(std::string_view field, uint64_t max) {
    const auto len = Get<uint64_t>(fmt::format("{} length", field));
    if (len > max) Fail(fmt::format("{} length {} exceeds {}", field, len, max));
    std::string s(len, '\0');
    Read(s.data(), len, field);
    return s;
  }
  // Bytes another reader consumed from the same stream (a nested record).
  void Skip(uint64_t bytes) { pos_ += bytes; }

 private:
  std::istream& in_;
  uint64_t size_, pos_ = 0;
  std::string prefix_;
  StateChecksum sum_;  // of every byte Read (not those Skipped: a nested reader sums its own)
};

// A state file opened for one bounded read (`shown`: its name as messages print it); a missing file,
// one that is not a regular file or cannot be read is InputError.
struct StateFileIn {
  StateFileIn(const std::string& path, const std::string& shown) {
    std::error_code ec;
    const auto st = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(st))
      throw InputError(fmt::format("cannot read state file '{}': {}", shown, ec ? ec.message() : "no such file"));
    if (!std::filesystem::is_regular_file(st))
      throw InputError(fmt::format("state file '{}' is not a regular file", shown));
    size = std::filesystem::file_size(path, ec);
    in.open(path, std::ios::binary);
    if (ec || !in) throw InputError(fmt::format("cannot read state file '{}'", shown));
  }
  std::ifstream in;
  uint64_t size = 0;
};

// An istream over bytes in memory, without a copy. Not copied or moved (a moved istream loses its
// buffer).
class MemoryStream : private std::streambuf, public std::istream {
 public:
  MemoryStream(const MemoryStream&) = delete;
  MemoryStream& operator=(const MemoryStream&) = delete;
  MemoryStream(const void* data, size_t size) : std::istream(this) {
    char* p = const_cast<char*>(static_cast<const char*>(data));
    setg(p, p, p + size);
  }
};

}  // namespace ciuic
