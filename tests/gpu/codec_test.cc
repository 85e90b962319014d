// CUDA codec twins against the CPU oracle, bit for bit: wire bytes, residuals over several
// error-feedback steps (stochastic rounding with the same seed included), decode, decode-accumulate,
// the fused decode-add-encode hop, and the fused kernels. Skips cleanly without a CUDA device.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "kernels/codec.h"

namespace ciuic {
namespace {

bool HaveCudaDevice() { return cuda::Available(); }

std::vector<float> Gradients(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::student_t_distribution<float> t(3.0f);
  std::vector<float> g(n);
  for (float& x : g) x = 1e-3f * t(rng);
  return g;
}

template <class T>
std::vector<T> ToHost(const Buffer& b, size_t count) {
  std::vector<T> out(count);
  CopyBytes(out.data(), MemoryKind::kHost, b.data(), b.kind(), count * sizeof(T));
  return out;
}

Buffer ToDevice(const void* p, size_t bytes) {
  Buffer b(std::max<size_t>(bytes, 1), MemoryKind::kDevice);
  CopyBytes(b.data(), MemoryKind::kDevice, p, MemoryKind::kHost, bytes);
  return b;
}

struct Case {
  const char* codec;
  Rounding rounding;
  TopKSelect select;
};

class CodecTwin : public ::testing::TestWithParam<Case> {};

TEST_P(CodecTwin, CudaEqualsCpuBitForBit) {
  if (!HaveCudaDevice()) GTEST_SKIP() << "no CUDA device";
  CodecSpec s = ParseCodec(GetParam().codec);
  s.rounding = GetParam().rounding;
  s.select = GetParam().select;
  // Blocks of 128 and 256 elements take the register path of encode (a short last block, and pointers
  // off 16-byte alignment, the element-wise one); 256 is the default block.
  for (const uint32_t block : {128u, 256u}) {
    s.block = block;
    const Codec c(s);
    for (size_t n : {size_t{1}, size_t{7}, size_t{127}, size_t{129}, size_t{100003}, size_t{1} << 22}) {
      if (block == 256 && n == size_t{1} << 22) continue;  // the large case once
      CodecState host_state, dev_state;
      for (int step = 0; step < 3; ++step) {
        const std::vector<float> g = Gradients(n, n * 7 + step);
        const size_t wb = c.WireBytes(n);
        std::vector<uint8_t> host_wire(wb);
        c.Encode(g.data(), n, host_wire.data(), &host_state);
        Buffer dg = ToDevice(g.data(), n * 4), dwire(std::max<size_t>(wb, 1), MemoryKind::kDevice);
        c.Encode(dg.as<float>(), n, dwire.data(), &dev_state);
        ASSERT_EQ(ToHost<uint8_t>(dwire, wb), host_wire) << GetParam().codec << " n=" << n << " step=" << step;
        if (host_state.residual.bytes() > 0) {
          const std::vector<float> hr(host_state.residual.as<float>(), host_state.residual.as<float>() + n);
          const std::vector<float> dr = ToHost<float>(dev_state.residual, n);
          ASSERT_EQ(0, std::memcmp(hr.data(), dr.data(), n * 4)) << "residual " << GetParam().codec << " n=" << n;
        }
        // Decode and decode-accumulate.
        std::vector<float> host_out(n, 0.5f);
        c.DecodeAccumulate(host_wire.data(), n, host_out.data(), static_cast<uint64_t>(step));
        std::vector<float> half(n, 0.5f);
        Buffer dout = ToDevice(half.data(), n * 4);
        c.DecodeAccumulate(dwire.data(), n, dout.as<float>(), static_cast<uint64_t>(step));
        const std::vector<float> got = ToHost<float>(dout, n);
        ASSERT_EQ(0, std::memcmp(got.data(), host_out.data(), n * 4)) << "decode " << GetParam().codec << " n=" << n;
        std::vector<float> host_plain(n);
        c.Decode(host_wire.data(), n, host_plain.data(), static_cast<uint64_t>(step));
        c.Decode(dwire.data(), n, dout.as<float>(), static_cast<uint64_t>(step));
        const std::vector<float> plain = ToHost<float>(dout, n);
        ASSERT_EQ(0, std::memcmp(plain.data(), host_plain.data(), n * 4)) << "plain decode " << GetParam().codec;
        if (n == 100003 && step == 0) {
          // A piece of a bucket one element in: off 16-byte alignment.
          CodecState hs, ds;
          std::vector<uint8_t> hw(c.WireBytes(n - 1));
          c.Encode(g.data() + 1, n - 1, hw.data(), &hs);
          Buffer dw(hw.size(), MemoryKind::kDevice);
          c.Encode(dg.as<float>() + 1, n - 1, dw.data(), &ds);
          ASSERT_EQ(ToHost<uint8_t>(dw, hw.size()), hw) << "offset encode " << GetParam().codec << " block " << block;
        }
        if (c.HasDecodeAddEncode()) {
          const std::vector<float> local = Gradients(n, 99 + n);
          std::vector<uint8_t> host_hop(wb);
          c.DecodeAddEncode(host_wire.data(), local.data(), n, host_hop.data(), 5);
          Buffer dlocal = ToDevice(local.data(), n * 4), dhop(std::max<size_t>(wb, 1), MemoryKind::kDevice);
          c.DecodeAddEncode(dwire.data(), dlocal.as<float>(), n, dhop.data(), 5);
          ASSERT_EQ(ToHost<uint8_t>(dhop, wb), host_hop) << "hop " << GetParam().codec << " n=" << n;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, CodecTwin,
                         ::testing::Values(Case{"fp16", Rounding::kNearest, TopKSelect::kExact},
                                           Case{"bf16", Rounding::kNearest, TopKSelect::kExact},
                                           Case{"int8", Rounding::kNearest, TopKSelect::kExact},
                                           Case{"int8", Rounding::kStochastic, TopKSelect::kExact},
                                           Case{"int4", Rounding::kNearest, TopKSelect::kExact},
                                           Case{"int4", Rounding::kStochastic, TopKSelect::kExact},
                                           Case{"fp8e4m3", Rounding::kNearest, TopKSelect::kExact},
                                           Case{"fp8e4m3", Rounding::kStochastic, TopKSelect::kExact},
                                           Case{"fp8e5m2", Rounding::kNearest, TopKSelect::kExact},
                                           Case{"fp8e5m2", Rounding::kStochastic, TopKSelect::kExact},
                                           Case{"sign1", Rounding::kNearest, TopKSelect::kExact},
                                           Case{"topk:0.01", Rounding::kNearest, TopKSelect::kExact},
                                           Case{"topk:0.01", Rounding::kNearest, TopKSelect::kSampled},
                                           Case{"randomk:0.01", Rounding::kNearest, TopKSelect::kExact},
                                           Case{"powersgd:4", Rounding::kNearest, TopKSelect::kExact}),
                         [](const auto& info) {
                           std::string s = std::string(info.param.codec) +
                                           (info.param.rounding == Rounding::kStochastic ? "_sr" : "") +
                                           (info.param.select == TopKSelect::kSampled ? "_sampled" : "");
                           for (char& ch : s)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// Keys drawn from a handful of magnitudes: the threshold is shared by thousands of elements spread
// over every tile, so the slots depend on how many equal keys each tile learns came before it (the
// selection pass's look-back) and on taking only the first take_equal of them in index order.
TEST(TopKTwin, TiesAcrossTilesTakeTheLowestIndicesLikeTheCpu) {
  if (!HaveCudaDevice()) GTEST_SKIP() << "no CUDA device";
  const size_t n = (size_t{1} << 21) + 5;  // 513 tiles of 4096, the last one short
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> level(-3, 3);
  for (const TopKSelect select : {TopKSelect::kExact, TopKSelect::kSampled}) {
    for (const double ratio : {0.001, 0.3, 0.55}) {
      CodecSpec s = ParseCodec("topk:0.01");
      s.ratio = ratio;
      s.select = select;
      const Codec c(s);
      CodecState host_state, dev_state;
      for (int step = 0; step < 2; ++step) {
        std::vector<float> g(n);
        for (float& x : g) x = 1e-3f * static_cast<float>(level(rng));
        const size_t wb = c.WireBytes(n);
        std::vector<uint8_t> host_wire(wb);
        c.Encode(g.data(), n, host_wire.data(), &host_state);
        Buffer dg = ToDevice(g.data(), n * 4), dwire(wb, MemoryKind::kDevice);
        c.Encode(dg.as<float>(), n, dwire.data(), &dev_state);
        ASSERT_EQ(ToHost<uint8_t>(dwire, wb), host_wire)
            << (select == TopKSelect::kExact ? "exact" : "sampled") << " ratio " << ratio << " step " << step;
        const std::vector<float> hr(host_state.residual.as<float>(), host_state.residual.as<float>() + n);
        ASSERT_EQ(0, std::memcmp(hr.data(), ToHost<float>(dev_state.residual, n).data(), n * 4)) << "residual";
      }
    }
  }
}

// Tensors longer than one round of the widest grid (2112 blocks x 256 threads x 16 elements), at
// element offsets that are and are not multiples of 4, out and back.
TEST(FusedTwin, LongTensorsAtOddOffsetsFlattenAndComeBack) {
  if (!HaveCudaDevice()) GTEST_SKIP() << "no CUDA device";
  const std::vector<size_t> counts = {3, 9000001, 5, 9000000, 1};
  std::vector<std::vector<float>> host;
  std::vector<Buffer> dev;
  std::vector<TensorRef> refs;
  size_t total = 0;
  for (size_t t = 0; t < counts.size(); ++t) {
    host.push_back(Gradients(counts[t], 40 + t));
    dev.push_back(ToDevice(host.back().data(), counts[t] * 4));
    refs.push_back({dev.back().as<float>(), counts[t]});
    total += counts[t];
  }
  Buffer bucket(total * 4, MemoryKind::kDevice);
  FlattenTensors(refs.data(), static_cast<int>(refs.size()), bucket.as<float>(), nullptr);
  const std::vector<float> flat = ToHost<float>(bucket, total);
  size_t off = 0;
  for (size_t t = 0; t < counts.size(); ++t) {
    ASSERT_EQ(0, std::memcmp(flat.data() + off, host[t].data(), counts[t] * 4)) << "flatten, tensor " << t;
    off += counts[t];
    SetBytes(dev[t].data(), MemoryKind::kDevice, 0, counts[t] * 4);
  }
  UnflattenTensors(bucket.as<float>(), refs.data(), static_cast<int>(refs.size()), nullptr);
  for (size_t t = 0; t < counts.size(); ++t)
    ASSERT_EQ(0, std::memcmp(ToHost<float>(dev[t], counts[t]).data(), host[t].data(), counts[t] * 4))
        << "unflatten, tensor " << t;
}

TEST(FusedTwin, FlattenUnscaleAndNormMatchTheCpu) {
  if (!HaveCudaDevice()) GTEST_SKIP() << "no CUDA device";
  std::vector<std::vector<float>> host;
  std::vector<Buffer> dev;
  std::vector<TensorRef> refs;
  size_t total = 0;
  for (size_t t = 0; t < 600; ++t) {
    host.push_back(Gradients(1 + (t * 131) % 5000, t));
    dev.push_back(ToDevice(host.back().data(), host.back().size() * 4));
    refs.push_back({dev.back().as<float>(), host.back().size()});
    total += host.back().size();
  }
  Buffer bucket(total * 4, MemoryKind::kDevice);
  FlattenTensors(refs.data(), static_cast<int>(refs.size()), bucket.as<float>(), nullptr);
  std::vector<float> flat = ToHost<float>(bucket, total);
  size_t off = 0;
  for (const auto& h : host) {
    ASSERT_EQ(0, std::memcmp(flat.data() + off, h.data(), h.size() * 4));
    off += h.size();
  }
  Buffer flag(4, MemoryKind::kDevice), norm(8, MemoryKind::kDevice);
  SetBytes(flag.data(), MemoryKind::kDevice, 0, 4);
  UnscaleCheckNorm(bucket.as<float>(), total, 1.0f / 256, flag.as<uint32_t>(), norm.as<double>(), nullptr);
  uint32_t host_flag = 0;
  double host_norm = 0;
  UnscaleCheckNorm(flat.data(), total, 1.0f / 256, &host_flag, &host_norm, nullptr);
  EXPECT_EQ(ToHost<float>(bucket, total), flat);
  EXPECT_EQ(ToHost<uint32_t>(flag, 1)[0], 0u);
  EXPECT_NEAR(ToHost<double>(norm, 1)[0], host_norm, 1e-12 * host_norm);
  UnflattenTensors(bucket.as<float>(), refs.data(), static_cast<int>(refs.size()), nullptr);
  EXPECT_EQ(ToHost<float>(dev[3], host[3].size())[0], host[3][0] * (1.0f / 256));
}

}  // namespace
}  // namespace ciuic
