// rd: recursive halving (reduce-scatter) + recursive doubling (allgather); ranks beyond the largest
// power of two fold their data into a partner first and get the result back at the end.
// Uncompressed only. log2(P) latency steps instead of P-1: for small messages on many ranks.
#include <utility>
#include <vector>

#include "collectives/algorithms/hops.h"
#include "core/trace.h"
#include "kernels/codec_kernels.h"

namespace ciuic {

void AllReduceEngine::Impl::RecursiveDoubling(Communicator& c, float* data, size_t n) {
  const int p = c.Size(), r = c.Rank();
  if (p == 1) return;
  int p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  float* tmp = Scratch<float>(0, n * 4 + 4);
  // Fold: ranks >= p2 hand their data to rank - p2 and wait for the result.
  if (r >= p2) {
    Exchange(c, data, n * 4, r - p2, nullptr, 0, r - p2, nullptr);
    Exchange(c, nullptr, 0, r - p2, data, n * 4, r - p2, nullptr);
    return;
  }
  if (r + p2 < p) {
    Exchange(c, nullptr, 0, r + p2, tmp, n * 4, r + p2, nullptr);
    trace::Span span("reduce", trace::Category::kCompute);
    span.With("bytes", static_cast<int64_t>(n * 4));
    AddInPlace(data, tmp, n, c.Stream());
  }
  // Recursive halving: keep shrinking [lo, hi) to the half this rank owns.
  size_t lo = 0, hi = n;
  std::vector<std::pair<size_t, size_t>> kept;
  {
    trace::Span phase("reduce-scatter", trace::Category::kPhase);
    phase.With("bytes", static_cast<int64_t>(n * 4)).With("ranks", p2);
    for (int mask = p2 / 2; mask >= 1; mask /= 2) {
      const int partner = r ^ mask;
      const size_t mid = lo + (hi - lo) / 2;
      const bool upper = (r & mask) != 0;
      const size_t keep_lo = upper ? mid : lo, keep_hi = upper ? hi : mid;
      const size_t give_lo = upper ? lo : mid, give_hi = upper ? mid : hi;
      Exchange(c, data + give_lo, (give_hi - give_lo) * 4, partner, tmp, (keep_hi - keep_lo) * 4, partner,
               [&](size_t off, size_t bytes, const void* got) {
                 AddInPlace(data + keep_lo + off / 4, static_cast<const float*>(got), bytes / 4, c.Stream());
               });
      kept.emplace_back(lo, hi);
      lo = keep_lo;
      hi = keep_hi;
    }
  }
  // Recursive doubling: give back the owned part, receive the partner's, in reverse order.
  trace::Span phase("allgather", trace::Category::kPhase);
  phase.With("bytes", static_cast<int64_t>(n * 4)).With("ranks", p2);
  for (int mask = 1, i = static_cast<int>(kept.size()) - 1; mask < p2; mask *= 2, --i) {
    const int partner = r ^ mask;
    const auto [plo, phi] = kept[static_cast<size_t>(i)];
    const size_t mid = plo + (phi - plo) / 2;
    const bool upper = (r & mask) != 0;
    const size_t other_lo = upper ? plo : mid, other_hi = upper ? mid : phi;
    Exchange(c, data + lo, (hi - lo) * 4, partner, data + other_lo, (other_hi - other_lo) * 4, partner, nullptr);
    lo = plo;
    hi = phi;
  }
  if (r + p2 < p) {
    Exchange(c, data, n * 4, r + p2, nullptr, 0, r + p2, nullptr);
  }
}

}  // namespace ciuic
