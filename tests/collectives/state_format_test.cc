// The state formats on their own (collectives/state_format.h): what is written reads back bit for bit,
// and a byte changed or cut anywhere is refused with InputError, never loaded with other values.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/state_format.h"
#include "core/error.h"
#include "kernels/codec.h"

namespace ciuic {
namespace {

Buffer Floats(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  Buffer b(n * 4, MemoryKind::kHost);
  auto* p = static_cast<float*>(b.data());
  for (size_t i = 0; i < n; ++i) p[i] = d(rng);
  return b;
}

bool SameFloats(const Buffer& a, const Buffer& b) {
  return a.bytes() == b.bytes() && (a.bytes() == 0 || std::memcmp(a.data(), b.data(), a.bytes()) == 0);
}

// The shapes this test's "runtime" keeps: a residual of every element, a server residual of half, Q of 3.
StateBufferShape Shape(uint64_t count) { return {count, count / 2, 3}; }

StateFileExpect Expect() { return {{2, 1, "int8"}, "ring", 64, Shape, MemoryKind::kHost}; }

StateMap States(std::mt19937& rng) {
  StateMap m;
  CodecState a;
  a.step = 5;
  a.count = 40;
  a.residual = Floats(rng, 40);
  a.server_residual = Floats(rng, 20);
  a.q = Floats(rng, 3);
  m.emplace(std::pair<uint64_t, uint64_t>{3, 0}, std::move(a));
  CodecState b;  // a bucket of two tensors (top bit), residual only: the others made on first use
  b.step = 1;
  b.count = 7;
  b.residual = Floats(rng, 7);
  m.emplace(std::pair<uint64_t, uint64_t>{9, (uint64_t{1} << 63) | 2}, std::move(b));
  return m;
}

StateMap Read(const std::string& bytes) {
  std::istringstream in(bytes);
  BoundedReader r(in, bytes.size(), "state file 't'");
  return ReadStateFile(r, "t", Expect());
}

TEST(StateFormat, AStateFileReadsBackBitForBitAndRefusesEveryChangedOrMissingByte) {
  std::mt19937 rng(11);
  const StateMap states = States(rng);
  std::ostringstream out;
  WriteStateFile(out, {2, 1, "int8"}, states);
  const std::string bytes = out.str();
  const StateMap back = Read(bytes);
  ASSERT_EQ(back.size(), states.size());
  for (const auto& [key, st] : states) {
    const CodecState& b = back.at(key);
    EXPECT_EQ(b.step, st.step);
    EXPECT_EQ(b.count, st.count);
    EXPECT_TRUE(SameFloats(b.residual, st.residual));
    EXPECT_TRUE(SameFloats(b.server_residual, st.server_residual));
    EXPECT_TRUE(SameFloats(b.q, st.q));
  }
  std::ostringstream again;
  WriteStateFile(again, {2, 1, "int8"}, back);
  EXPECT_EQ(again.str(), bytes);
  // Every bit flipped, one at a time; every length short of the whole.
  for (size_t i = 0; i < bytes.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      EXPECT_THROW(Read(bad), InputError) << "byte " << i << " bit " << bit;
    }
  for (size_t n = 0; n < bytes.size(); ++n) EXPECT_THROW(Read(bytes.substr(0, n)), InputError) << n << " bytes";
  EXPECT_THROW(Read(bytes + '\0'), InputError);
}

TEST(StateFormat, AStateFileOfAnotherWorldRankCodecOrShapeIsRefusedByName) {
  std::mt19937 rng(12);
  const auto message = [&](StateFileHead head, const StateMap& states) {
    std::ostringstream out;
    WriteStateFile(out, head, states);
    try {
      Read(out.str());
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("loaded");
  };
  EXPECT_NE(message({3, 1, "int8"}, States(rng)).find("saved by 3 ranks"), std::string::npos);
  EXPECT_NE(message({2, 0, "int8"}, States(rng)).find("belongs to rank 0, not rank 1"), std::string::npos);
  EXPECT_NE(message({2, 1, "fp16"}, States(rng)).find("is for codec fp16"), std::string::npos);
  StateMap wrong = States(rng);
  wrong.begin()->second.q = Floats(rng, 4);  // Q of 4 where 3 are kept
  EXPECT_NE(message({2, 1, "int8"}, wrong).find("Q holds 4 floats where codec int8 keeps 3"), std::string::npos);
  StateMap big = States(rng);
  big.begin()->second.count = 65;  // more than a bucket
  EXPECT_NE(message({2, 1, "int8"}, big).find("exceeds this runtime's bucket of 64"), std::string::npos);
  StateMap nan = States(rng);
  static_cast<float*>(nan.begin()->second.residual.data())[6] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(message({2, 1, "int8"}, nan).find("residual[6] is nan"), std::string::npos);
}

TEST(StateFormat, CodecStateBytesReadBackBitForBitAcceptFormatOneAndRefuseEveryChangedOrMissingByte) {
  std::mt19937 rng(13);
  CodecSpec spec = ParseCodec("powersgd:2");
  spec.block = 32;
  const Codec codec(spec);
  const size_t n = 100;
  CodecState st;
  codec.Prepare(st, n, MemoryKind::kHost);
  const StateBufferShape shape = CodecStateShape(codec, n);
  ASSERT_EQ(shape.residual, n);
  ASSERT_GT(shape.q, 0u);
  st.residual = Floats(rng, shape.residual);
  st.q = Floats(rng, shape.q);
  st.step = 4;
  const std::vector<uint8_t> bytes = SaveCodecStateBytes(codec, n, st);
  const auto load = [&](const std::vector<uint8_t>& b) { return LoadCodecStateBytes(codec, n, b.data(), b.size()); };
  const CodecState back = load(bytes);
  EXPECT_EQ(back.step, 4u);
  EXPECT_EQ(back.count, n);
  EXPECT_TRUE(SameFloats(back.residual, st.residual));
  EXPECT_TRUE(SameFloats(back.q, st.q));
  EXPECT_EQ(SaveCodecStateBytes(codec, n, back), bytes);
  // Format 1: version 1, no checksum: the same state.
  std::vector<uint8_t> one(bytes.begin(), bytes.end() - 8);
  one[8] = 1;
  const CodecState old = load(one);
  EXPECT_TRUE(SameFloats(old.residual, st.residual));
  EXPECT_EQ(SaveCodecStateBytes(codec, n, old), bytes);
  for (size_t i = 0; i < bytes.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> bad = bytes;
      bad[i] = static_cast<uint8_t>(bad[i] ^ (1 << bit));
      EXPECT_THROW(load(bad), InputError) << "byte " << i << " bit " << bit;
    }
  for (size_t k = 0; k < bytes.size(); ++k)
    EXPECT_THROW(load(std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(k))), InputError)
        << k << " bytes";
  // Another codec or element count: refused by name.
  CodecSpec int8 = ParseCodec("int8");
  int8.block = 32;
  EXPECT_THROW(LoadCodecStateBytes(Codec(int8), n, bytes.data(), bytes.size()), InputError);
  EXPECT_THROW(LoadCodecStateBytes(codec, n + 1, bytes.data(), bytes.size()), InputError);
}

}  // namespace
}  // namespace ciuic
