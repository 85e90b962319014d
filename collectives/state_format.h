#pragma once
// The runtime's binary state formats in one place, every read going through the one bounded reader
// (state_reader.h), so no length field can make a loader allocate or read past the end:
//   - a rank's error-feedback state file (Runtime::Save / Load; the profile runtime's file of several
//     configurations, runtime_rules.cc, nests one per configuration): WriteStateFile, ReadStateFile;
//   - the C API's codec-state bytes (ciuic_codec_state_save / _load): SaveCodecStateBytes,
//     LoadCodecStateBytes.
// Native byte order. Format 1 ends with the last buffer, format 2 adds a u64 StateChecksum of every
// byte before it; both are read, format 2 is written.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "collectives/state_reader.h"
#include "core/buffer.h"
#include "kernels/codec.h"

namespace ciuic {

// A rank's states: (tensor id, bucket) -> the codec state of that bucket.
using StateMap = std::map<std::pair<uint64_t, uint64_t>, CodecState>;

// Buckets of AllReduce are numbered; a bucket of several tensors is keyed by its tensor count with the
// top bit set (AllReduceTensors). "bucket 3", "a bucket of 4 tensors".
std::string BucketName(uint64_t bucket);

// The floats each buffer of a state keeps for `count` elements (empty buffers are made on first use).
struct StateBufferShape {
  size_t residual = 0, server_residual = 0, q = 0;
};

// Whose states a file holds.
struct StateFileHead {
  int world = 1, rank = 0;
  std::string codec;  // the codec's spelling (Codec::Name)
};

// State file format 2: magic CIUICEFS, u32 version, u32 world size, u32 rank, u64 codec-name length +
// name, u64 record count, then per record (ascending key order) u64 tensor id, bucket, step, count and
// three buffers (residual, server residual, Q), each a u64 float count + the floats; then the checksum.
void WriteStateFile(std::ostream& out, const StateFileHead& head, const StateMap& states);

// What a state file must match: the runtime it is loaded into.
struct StateFileExpect {
  StateFileHead head;
  std::string algo;  // the runtime's algorithm, named when a buffer it keeps none of is present
  size_t max_count;  // elements in one of its buckets
  std::function<StateBufferShape(uint64_t count)> shape;
  MemoryKind kind;  // where loaded buffers go
};

// One state file held by `in` (its prefix names the file; `shown` is the file's printable name).
// Every buffer must be empty or exactly the floats `want.shape` gives, all finite; records unique and
// in order; the checksum (format 2) right; nothing after it. Else InputError naming the field.
StateMap ReadStateFile(BoundedReader& in, const std::string& shown, const StateFileExpect& want);

// The floats a codec state keeps for `n` elements (what Codec::Prepare makes): residual and Q.
StateBufferShape CodecStateShape(const Codec& codec, size_t n);

// Codec-state bytes format 2: magic CIUICCST, u32 version, u32 0, u64 codec-name length + name, u64
// count, u64 step, residual and Q (each a u64 float count + the floats), the checksum.
std::vector<uint8_t> SaveCodecStateBytes(const Codec& codec, size_t n, const CodecState& st);
// Bytes SaveCodecStateBytes wrote for the same codec and `n`, loaded into host buffers; else
// InputError "codec state bytes: ...".
CodecState LoadCodecStateBytes(const Codec& codec, size_t n, const void* data, size_t size);

}  // namespace ciuic
