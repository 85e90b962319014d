// libFuzzer harnesses for the codecs (CIUIC_FUZZ_TARGET picks one):
//   0 codec_wire: every codec's decoders on arbitrary wire bytes, as a corrupt or hostile peer's payload
//     would reach them. Input: byte 0 picks the codec (kCodecs), bytes 1-2 the element count (1..4096),
//     byte 3 the step, the rest the wire (cut or zero-padded to WireBytes). Decode, DecodeAccumulate
//     and, where the codec has one, the ring hop's DecodeAddEncode must end without a crash or a
//     sanitizer report (a refusal is a ciuic::Error); no index or length on the wire may reach outside
//     the buffers.
//   1 codec_spec: the codec and algorithm spellings users write (--codec, --algo, profiles). A spelling
//     is refused with a ciuic::Error or parses to a spec whose canonical name parses back to itself.
// Run with the seed corpus: scripts/fuzz.sh SECONDS codec_wire codec_spec
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/algorithms/allreduce.h"
#include "core/error.h"
#include "kernels/codec.h"
#include "kernels/codec_spec.h"

#if CIUIC_FUZZ_TARGET == 0
namespace {

constexpr const char* kCodecs[] = {"none",    "fp16",  "bf16",      "int8",        "int4",      "fp8e4m3",
                                   "fp8e5m2", "sign1", "topk:0.05", "randomk:0.1", "powersgd:2"};
constexpr size_t kCodecCount = sizeof kCodecs / sizeof kCodecs[0];

}  // namespace
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
#if CIUIC_FUZZ_TARGET == 0
  if (size < 4) return 0;
  ciuic::CodecSpec spec = ciuic::ParseCodec(kCodecs[data[0] % kCodecCount]);
  spec.block = 32;
  const ciuic::Codec codec(spec);
  const size_t n = 1 + (static_cast<size_t>(data[1]) | static_cast<size_t>(data[2]) << 8) % 4096;
  const uint64_t step = data[3];
  std::vector<uint8_t> wire(codec.WireBytes(n), 0);
  std::memcpy(wire.data(), data + 4, std::min(wire.size(), size - 4));
  std::vector<float> out(n), acc(n, 1.0f), local(n, 0.5f);
  std::vector<uint8_t> again(wire.size());
  try {
    codec.Decode(wire.data(), n, out.data(), step);
    codec.DecodeAccumulate(wire.data(), n, acc.data(), step);
    if (codec.HasDecodeAddEncode()) codec.DecodeAddEncode(wire.data(), local.data(), n, again.data(), step);
  } catch (const ciuic::Error&) {
    // refused: what a bad payload may get
  }
#elif CIUIC_FUZZ_TARGET == 1
  const std::string text(reinterpret_cast<const char*>(data), size);
  // A canonical name must parse back to itself: a refusal there is a finding, not a refusal.
  const auto must = [](auto parse_back) {
    try {
      if (!parse_back()) __builtin_trap();
    } catch (const ciuic::Error&) {
      __builtin_trap();
    }
  };
  try {
    const ciuic::CodecSpec spec = ciuic::ParseCodec(text);
    const std::string name = ciuic::CodecName(spec);
    must([&] { return ciuic::CodecName(ciuic::ParseCodec(name)) == name; });
    const ciuic::Codec codec(spec);
    (void)codec.WireBytes(1000);
  } catch (const ciuic::Error&) {
  }
  try {
    const ciuic::AllReduceAlgo algo = ciuic::ParseAlgo(text);
    must([&] { return ciuic::ParseAlgo(ciuic::AlgoName(algo)) == algo; });
  } catch (const ciuic::Error&) {
  }
#endif
  return 0;
}
