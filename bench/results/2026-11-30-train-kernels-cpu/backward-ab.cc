// The same-run before/after of the CPU LayerNorm backward (README.md): times cpu::AddLayerNormBackward
// (mode 0: with dgamma/dbeta; 1: without), cpu::LnActDropoutBackward GELU-erf p 0.1 in fp32 (2) and bf16
// (3) at ROWS x 1024 on THREADS threads: the median and min of ITERS calls. Linked once against the
// kernels' static library of 3b84c5d ("old") and once against today's ("cur"), run alternating:
//   g++ -O2 -std=c++20 -I. backward-ab.cc -o ab_old old/libciuic_kernels.a build/core/libciuic_core.a \
//       -lfmt -lpthread -L/usr/local/cuda/lib64 -lcudart -lcupti -lnccl -lsqlite3 -lhwloc
//   for i in 1 2 3; do for v in old cur; do for m in 0 2 3; do echo -n "$v "; ./ab_$v 4096 $m 2 40; done; done; done
// Usage: ab ROWS MODE [THREADS [ITERS]]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
#include "core/parallel.h"
#include "kernels/train_kernels.h"
using namespace ciuic;
int main(int argc, char** argv) {
  size_t rows = argc > 1 ? atol(argv[1]) : 4096, cols = 1024;
  int mode = argc > 2 ? atoi(argv[2]) : 0;
  if (argc > 3) SetParallelThreads(atoi(argv[3]));
  size_t n = rows * cols;
  std::vector<float> dy(n), x(n), dsum(n), dx(n), g(cols, 1.1f), b(cols, 0.1f), mean(rows), rstd(rows), y(n), sum(n),
      dg(cols), db(cols);
  for (size_t i = 0; i < n; ++i) {
    dy[i] = (i * 7919 % 1000) * 1e-3f;
    x[i] = (i * 104729 % 997) * 1e-3f;
    dsum[i] = 0.5f;
  }
  std::vector<float> ws(TrainWorkspaceBytes(rows, cols, MemoryKind::kHost) / 4 + 1);
  cpu::AddLayerNormForward(DType::kFloat32, rows, cols, x.data(), dsum.data(), g.data(), b.data(), 1e-5f, sum.data(),
                           y.data(), mean.data(), rstd.data(), nullptr);
  std::vector<double> t;
  const int iters = argc > 4 ? atoi(argv[4]) : 50;
  for (int it = 0; it < iters; ++it) {
    auto t0 = std::chrono::steady_clock::now();
    if (mode == 0)
      cpu::AddLayerNormBackward(DType::kFloat32, rows, cols, dy.data(), dsum.data(), sum.data(), g.data(), mean.data(),
                                rstd.data(), dx.data(), dg.data(), db.data(), ws.data(), nullptr);
    else if (mode == 2) {
      DropoutArgs d{0.1f, 5, 7};
      cpu::LnActDropoutBackward(DType::kFloat32, rows, cols, Activation::kGeluErf, d, dy.data(), x.data(), g.data(),
                                b.data(), mean.data(), rstd.data(), dx.data(), dg.data(), db.data(), ws.data(),
                                nullptr);
    } else if (mode == 3) {
      DropoutArgs d{0.1f, 5, 7};
      cpu::LnActDropoutBackward(DType::kBFloat16, rows, cols, Activation::kGeluErf, d, dy.data(), x.data(), g.data(),
                                b.data(), mean.data(), rstd.data(), dx.data(), dg.data(), db.data(), ws.data(),
                                nullptr);
    } else
      cpu::AddLayerNormBackward(DType::kFloat32, rows, cols, dy.data(), dsum.data(), sum.data(), g.data(), mean.data(),
                                rstd.data(), dx.data(), nullptr, nullptr, nullptr, nullptr);
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  printf("rows %zu mode %d median %.1f us  min %.1f\n", rows, mode, t[t.size() / 2], t[0]);
}
