#include "collectives/state_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/codec_kernels.h"

namespace ciuic {

namespace {

constexpr char kStateFileMagic[8] = {'C', 'I', 'U', 'I', 'C', 'E', 'F', 'S'};
constexpr char kCodecBytesMagic[8] = {'C', 'I', 'U', 'I', 'C', 'C', 'S', 'T'};
constexpr uint32_t kFormatVersion = 2;       // both formats
constexpr uint64_t kMinRecordBytes = 7 * 8;  // a state-file record whose three buffers are empty
constexpr uint64_t kMaxCodecName = 256;

// A name read from a file, safe to print: bytes outside printable ASCII as \xNN.
std::string Printable(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

// Writes to a stream and sums what it wrote (StateChecksum).
class SummedOut {
 public:
  explicit SummedOut(std::ostream& out) : out_(out) {}
  void Put(const void* data, size_t bytes) {
    out_.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    sum_.Add(data, bytes);
  }
  // The checksum of everything put, itself not summed.
  void PutChecksum() {
    const uint64_t v = sum_.value();
    out_.write(reinterpret_cast<const char*>(&v), 8);
  }

 private:
  std::ostream& out_;
  StateChecksum sum_;
};

// A u64 count and the first `floats` floats of `b` (host or device); none when `b` was never made.
void PutFloats(SummedOut& out, const Buffer& b, size_t floats) {
  const uint64_t n = b.bytes() ? floats : 0;
  out.Put(&n, 8);
  if (!n) return;
  std::vector<float> host(n);
  CopyBytes(host.data(), MemoryKind::kHost, b.data(), b.kind(), n * 4);
  out.Put(host.data(), n * 4);
}

// One buffer: empty (made fresh on first use) or exactly `expected` floats, all finite, placed in
// `kind` memory. `keeps` says, for a wrong count, what the loader keeps ("codec X keeps N for ...").
Buffer ReadFloats(BoundedReader& in, const std::string& field, size_t expected,
                  const std::function<std::string()>& keeps, MemoryKind kind) {
  const auto n = in.Get<uint64_t>(field + " length");
  if (n == 0) return Buffer();
  if (n != expected) in.Fail(fmt::format("{} holds {} floats where {}", field, n, keeps()));
  if (n > in.left() / 4) in.Fail(fmt::format("truncated: {} claims {} floats, {} bytes are left", field, n, in.left()));
  std::vector<float> host(n);
  in.Read(host.data(), n * 4, field);
  for (size_t i = 0; i < host.size(); ++i)
    if (!std::isfinite(host[i])) in.Fail(fmt::format("{}[{}] is {}: a loaded state must be finite", field, i, host[i]));
  Buffer b(n * 4, kind);
  CopyBytes(b.data(), kind, host.data(), MemoryKind::kHost, n * 4);
  return b;
}

// The version word after the magic: 1 or 2. `corrupt` ends the message for version 0.
uint32_t ReadVersion(BoundedReader& in, const char* corrupt) {
  const auto version = in.Get<uint32_t>("format version");
  if (version == 0) in.Fail(fmt::format("format version 0 does not exist (the first is 1): {}", corrupt));
  if (version > kFormatVersion)
    in.Fail(fmt::format("format {} is newer than this build reads (up to {})", version, kFormatVersion));
  return version;
}

std::string ReadCodecName(BoundedReader& in) {
  const auto len = in.Get<uint64_t>("codec name length");
  if (len > kMaxCodecName) in.Fail(fmt::format("codec name length {} exceeds {}", len, kMaxCodecName));
  std::string name(len, '\0');
  in.Read(name.data(), len, "codec name");
  return name;
}

}  // namespace

std::string BucketName(uint64_t bucket) {
  if (bucket >> 63) return fmt::format("a bucket of {} tensors", bucket & ~(uint64_t{1} << 63));
  return fmt::format("bucket {}", bucket);
}

void WriteStateFile(std::ostream& stream, const StateFileHead& head, const StateMap& states) {
  SummedOut out(stream);
  out.Put(kStateFileMagic, 8);
  const uint32_t words[3] = {kFormatVersion, static_cast<uint32_t>(head.world), static_cast<uint32_t>(head.rank)};
  out.Put(words, sizeof words);
  const uint64_t len = head.codec.size(), count = states.size();
  out.Put(&len, 8);
  out.Put(head.codec.data(), len);
  out.Put(&count, 8);
  for (const auto& [key, st] : states) {
    const uint64_t rec[4] = {key.first, key.second, st.step, st.count};
    out.Put(rec, sizeof rec);
    PutFloats(out, st.residual, st.residual.bytes() / 4);
    PutFloats(out, st.server_residual, st.server_residual.bytes() / 4);
    PutFloats(out, st.q, st.q.bytes() / 4);
  }
  out.PutChecksum();
}

StateMap ReadStateFile(BoundedReader& in, const std::string& shown, const StateFileExpect& want) {
  char magic[8];
  if (in.left() < sizeof magic) throw InputError(fmt::format("'{}' is not a ciuic state file", shown));
  in.Read(magic, sizeof magic, "magic");
  if (std::memcmp(magic, kStateFileMagic, sizeof magic) != 0)
    throw InputError(fmt::format("'{}' is not a ciuic state file", shown));
  const uint32_t version = ReadVersion(in, "the file is corrupt");
  const auto size = in.Get<uint32_t>("world size"), rank = in.Get<uint32_t>("rank");
  if (size != static_cast<uint32_t>(want.head.world))
    in.Fail(
        fmt::format("saved by {} ranks; the world now has {}: error-feedback state cannot be carried across "
                    "world sizes",
                    size, want.head.world));
  if (rank != static_cast<uint32_t>(want.head.rank))
    in.Fail(fmt::format("belongs to rank {}, not rank {}", rank, want.head.rank));
  const std::string codec = ReadCodecName(in);
  if (codec != want.head.codec)
    in.Fail(fmt::format("is for codec {}, the runtime uses {}", Printable(codec), want.head.codec));
  const auto records = in.Get<uint64_t>("record count");
  if (records > in.left() / kMinRecordBytes)
    in.Fail(fmt::format("record count {} cannot fit in the {} bytes left ({} bytes per record at least)", records,
                        in.left(), kMinRecordBytes));
  StateMap loaded;
  for (uint64_t i = 0; i < records; ++i) {
    const std::string rec = fmt::format("record {}", i);
    const auto id = in.Get<uint64_t>(rec + " tensor id"), bucket = in.Get<uint64_t>(rec + " bucket");
    const std::pair<uint64_t, uint64_t> key{id, bucket};
    const std::string name = fmt::format("{} (tensor {}, {})", rec, id, BucketName(bucket));
    if (!loaded.empty() && !(loaded.rbegin()->first < key))
      in.Fail(fmt::format("{} does not follow tensor {}, {}: records are saved once each, in ascending order", name,
                          loaded.rbegin()->first.first, BucketName(loaded.rbegin()->first.second)));
    CodecState st;
    st.step = in.Get<uint64_t>(name + " step");
    const auto count = in.Get<uint64_t>(name + " count");
    if (count > want.max_count)
      in.Fail(
          fmt::format("{} count {} exceeds this runtime's bucket of {} elements (saved with a larger bucket "
                      "size?)",
                      name, count, want.max_count));
    st.count = count;
    const StateBufferShape shape = want.shape(count);
    const auto buffer = [&](const char* field, size_t expected) {
      const auto keeps = [&] {
        if (expected == 0)
          return fmt::format("codec {} with algorithm {} keeps none for a state of {} elements", want.head.codec,
                             want.algo, count);
        return fmt::format("codec {} keeps {} for a state of {} elements on rank {} of {}", want.head.codec, expected,
                           count, want.head.rank, want.head.world);
      };
      return ReadFloats(in, name + " " + field, expected, keeps, want.kind);
    };
    st.residual = buffer("residual", shape.residual);
    st.server_residual = buffer("server residual", shape.server_residual);
    st.q = buffer("Q", shape.q);
    loaded.emplace_hint(loaded.end(), key, std::move(st));
  }
  if (version >= 2) in.CheckChecksum("the file");
  if (in.left() != 0)
    in.Fail(fmt::format("{} byte{} follow the last of {} records", in.left(), in.left() == 1 ? "" : "s", records));
  return loaded;
}

StateBufferShape CodecStateShape(const Codec& codec, size_t n) {
  StateBufferShape s;
  if (n == 0) return s;
  if (CodecHasResidual(codec.spec())) s.residual = n;
  if (codec.spec().kind == CodecKind::kPowerSgd)
    s.q = std::max<size_t>(PowerSgdView(n).cols * static_cast<size_t>(codec.spec().rank), 1);
  return s;
}

std::vector<uint8_t> SaveCodecStateBytes(const Codec& codec, size_t n, const CodecState& st) {
  std::ostringstream stream;
  SummedOut out(stream);
  out.Put(kCodecBytesMagic, 8);
  const uint32_t words[2] = {kFormatVersion, 0};
  out.Put(words, sizeof words);
  const std::string name = codec.Name();
  const uint64_t len = name.size(), rec[2] = {n, st.step};
  out.Put(&len, 8);
  out.Put(name.data(), name.size());
  out.Put(rec, sizeof rec);
  // The floats the shape gives, or none where the buffer was never made (or made smaller).
  const StateBufferShape shape = CodecStateShape(codec, n);
  PutFloats(out, st.residual, st.residual.bytes() >= shape.residual * 4 ? shape.residual : 0);
  PutFloats(out, st.q, st.q.bytes() >= shape.q * 4 ? shape.q : 0);
  out.PutChecksum();
  const std::string bytes = std::move(stream).str();
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

CodecState LoadCodecStateBytes(const Codec& codec, size_t n, const void* data, size_t size) {
  MemoryStream stream(data, size);
  BoundedReader in(stream, size, "codec state bytes");
  char magic[8];
  if (in.left() < sizeof magic) throw InputError("codec state bytes: too short to be a ciuic codec state");
  in.Read(magic, sizeof magic, "magic");
  if (std::memcmp(magic, kCodecBytesMagic, sizeof magic) != 0)
    throw InputError("codec state bytes: not a ciuic codec state (magic)");
  const uint32_t version = ReadVersion(in, "the bytes are corrupt");
  if (in.Get<uint32_t>("reserved word") != 0) in.Fail("the reserved word after the version is not 0");
  const std::string name = ReadCodecName(in);
  if (name != codec.Name())
    in.Fail(fmt::format("saved for codec {}, this state is for {}", Printable(name), codec.Name()));
  const auto count = in.Get<uint64_t>("count");
  if (count != n)
    in.Fail(fmt::format("saved for {} elements, this state is for {} (another bucket layout or model?)", count, n));
  CodecState st;
  st.step = in.Get<uint64_t>("step");
  st.count = count;
  const StateBufferShape shape = CodecStateShape(codec, n);
  const auto buffer = [&](const char* field, size_t expected) {
    const auto keeps = [&] {
      return fmt::format("codec {} keeps {} for a state of {} elements", codec.Name(), expected, n);
    };
    return ReadFloats(in, field, expected, keeps, MemoryKind::kHost);
  };
  st.residual = buffer("residual", shape.residual);
  st.q = buffer("Q", shape.q);
  if (version >= 2) in.CheckChecksum("the state");
  if (in.left() != 0) in.Fail(fmt::format("{} byte{} follow the state", in.left(), in.left() == 1 ? "" : "s"));
  return st;
}

}  // namespace ciuic
