// Google Benchmark micro suite: every codec's encode / decode / decode-accumulate, the fused kernels
// and a memcpy baseline, at 1 MiB and 64 MiB of fp32 gradients. bytes_per_second counts the fp32
// gradient bytes (as `ciuic-bench compress`). With a CUDA device the same set runs on device buffers
// with manual timing (CUDA events). Run: build/bin/ciuic-micro [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/config.h"
#include "core/timer.h"
#include "kernels/codec.h"

namespace ciuic {
namespace {

const char* const kCodecs[] = {"fp16",    "bf16",  "int8",      "int4",         "fp8e4m3",
                               "fp8e5m2", "sign1", "topk:0.01", "randomk:0.01", "powersgd:4"};

std::vector<float> Gradients(size_t n) {
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.0f, 1e-2f);
  std::vector<float> g(n);
  for (float& x : g) x = normal(rng);
  return g;
}

CodecSpec SpecOf(const char* codec, bool ef) {
  CodecSpec s = ParseCodec(codec);
  s.error_feedback = ef;
  return s;
}

struct Fixture {
  Fixture(const char* codec, size_t n, MemoryKind kind, bool ef)
      : c(SpecOf(codec, ef)),
        n(n),
        kind(kind),
        x(n * 4, kind),
        out(n * 4, kind),
        wire(std::max<size_t>(c.WireBytes(n), 1), kind) {
    const std::vector<float> g = Gradients(n);
    CopyBytes(x.data(), kind, g.data(), MemoryKind::kHost, n * 4);
    SetBytes(out.data(), kind, 0, n * 4);
    c.Encode(x.as<float>(), n, wire.data(), &state);
  }
  Codec c;
  size_t n;
  MemoryKind kind;
  Buffer x, out, wire;
  CodecState state;
};

enum class Op { kEncode, kEncodeEf, kDecode, kDecodeAcc, kDecodeAddEncode };

// Times one op; on the device with CUDA events and manual time.
void RunOp(benchmark::State& st, const char* codec, Op op, MemoryKind kind) {
  const size_t n = static_cast<size_t>(st.range(0)) / 4;
  if (kind == MemoryKind::kDevice && CudaDeviceCount() == 0) {
    st.SkipWithError("no CUDA device");
    return;
  }
  Fixture f(codec, n, kind, op == Op::kEncodeEf);
  if (op == Op::kDecodeAddEncode && !f.c.HasDecodeAddEncode()) {
    st.SkipWithError("codec has no fused decode-add-encode");
    return;
  }
  Buffer wire2(std::max<size_t>(f.c.WireBytes(n), 1), kind);
  auto body = [&] {
    switch (op) {
      case Op::kEncode:
      case Op::kEncodeEf:
        f.c.Encode(f.x.as<float>(), n, f.wire.data(), &f.state, nullptr, false);
        break;
      case Op::kDecode:
        f.c.Decode(f.wire.data(), n, f.out.as<float>(), f.state.step - 1);
        break;
      case Op::kDecodeAcc:
        f.c.DecodeAccumulate(f.wire.data(), n, f.out.as<float>(), f.state.step - 1);
        break;
      case Op::kDecodeAddEncode: {
        Buffer& w2 = wire2;
        f.c.DecodeAddEncode(f.wire.data(), f.x.as<float>(), n, w2.data(), 0);
        break;
      }
    }
  };
#if CIUIC_HAVE_CUDA
  std::unique_ptr<DeviceEventTimer> timer;
  if (kind == MemoryKind::kDevice) timer = std::make_unique<DeviceEventTimer>(nullptr);
#endif
  for (auto _ : st) {
    if (kind == MemoryKind::kDevice) {
#if CIUIC_HAVE_CUDA
      timer->Start();
      body();
      timer->Stop();
      st.SetIterationTime(timer->ElapsedUs() * 1e-6);
#endif
    } else {
      body();
      benchmark::ClobberMemory();
    }
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(n * 4));
  st.counters["ratio"] = static_cast<double>(n * 4) / static_cast<double>(f.c.WireBytes(n));
}

void BM_Memcpy(benchmark::State& st) {
  const size_t bytes = static_cast<size_t>(st.range(0));
  std::vector<char> a(bytes, 1), b(bytes, 2);
  for (auto _ : st) {
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_Memcpy)->Arg(1 << 20)->Arg(64 << 20);

void BM_Unscale(benchmark::State& st) {
  const size_t n = static_cast<size_t>(st.range(0)) / 4;
  std::vector<float> g = Gradients(n);
  uint32_t flag = 0;
  double norm = 0;
  for (auto _ : st) {
    UnscaleCheckNorm(g.data(), n, 1.0f, &flag, &norm, nullptr);
    benchmark::DoNotOptimize(norm);
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(n * 4));
}
BENCHMARK(BM_Unscale)->Arg(1 << 20)->Arg(64 << 20);

void BM_Flatten(benchmark::State& st) {
  const size_t n = static_cast<size_t>(st.range(0)) / 4, tensors = 256;
  std::vector<std::vector<float>> ts(tensors, std::vector<float>(n / tensors, 1.0f));
  std::vector<TensorRef> refs;
  for (auto& t : ts) refs.push_back({t.data(), t.size()});
  std::vector<float> bucket(n);
  for (auto _ : st) {
    FlattenTensors(refs.data(), static_cast<int>(refs.size()), bucket.data(), nullptr);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(n * 4));
}
BENCHMARK(BM_Flatten)->Arg(1 << 20)->Arg(64 << 20);

}  // namespace

// Registered by main.cc.
void Register() {
  const struct {
    Op op;
    const char* name;
  } ops[] = {{Op::kEncode, "encode"},
             {Op::kEncodeEf, "ef_encode"},
             {Op::kDecode, "decode"},
             {Op::kDecodeAcc, "decode_acc"},
             {Op::kDecodeAddEncode, "decode_add_encode"}};
  const bool gpu = CudaDeviceCount() > 0;
  for (const char* codec : kCodecs) {
    for (const auto& o : ops) {
      const bool heavy = std::string(codec).rfind("powersgd", 0) == 0;  // O(n^1.5) on one core: small size only
      auto* b = benchmark::RegisterBenchmark(
          (std::string("cpu/") + o.name + "/" + codec).c_str(),
          [codec, op = o.op](benchmark::State& st) { RunOp(st, codec, op, MemoryKind::kHost); });
      b->Arg(1 << 20);
      if (!heavy) b->Arg(64 << 20);
      if (gpu) {
        benchmark::RegisterBenchmark(
            (std::string("cuda/") + o.name + "/" + codec).c_str(),
            [codec, op = o.op](benchmark::State& st) { RunOp(st, codec, op, MemoryKind::kDevice); })
            ->Arg(1 << 20)
            ->Arg(64 << 20)
            ->UseManualTime();
      }
    }
  }
}

}  // namespace ciuic
