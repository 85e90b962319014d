// The hops every algorithm is built from: the pipelined point-to-point exchange (pieces of
// `piece_bytes`, `in_flight` outstanding each way, the reduction of a landed piece overlapping the
// next transfers; one grouped send/receive on stream-ordered transports), the uncompressed ring
// reduce-scatter and allgather halves, the byte-block ring allgather, and the one-time quantisation
// of a rank's own contribution with its error-feedback residual.
#include <algorithm>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <string>

#include <unistd.h>

#include "collectives/algorithms/hops.h"
#include "core/timer.h"
#include "core/trace.h"
#include "kernels/codec_kernels.h"

namespace ciuic {

using hops::ChunkOf;
using hops::Range;

namespace {

// The largest data cache one core of this machine sees (sysfs gives a shared cache's size per
// instance; sysconf may give the sum over a socket's instances), 32 MiB where neither says.
size_t LastLevelCacheBytes() {
  static const size_t bytes = [] {
    size_t best = 0;
    for (int i = 0; i < 8; ++i) {
      const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i);
      std::ifstream type(dir + "/type"), size(dir + "/size");
      std::string t, sz;
      if (!(type >> t) || !(size >> sz) || t == "Instruction" || sz.empty()) continue;
      const char unit = sz.back();
      const size_t v = std::strtoull(sz.c_str(), nullptr, 10);
      best = std::max(best, unit == 'K' ? v << 10 : unit == 'M' ? v << 20 : v);
    }
    if (best == 0) best = static_cast<size_t>(std::max(0L, ::sysconf(_SC_LEVEL3_CACHE_SIZE)));
    return best > 0 ? best : size_t{32} << 20;
  }();
  return bytes;
}

}  // namespace

void AllReduceEngine::Impl::Exchange(Communicator& c, const void* send, size_t send_bytes, int to, void* recv,
                                     size_t recv_bytes, int from,
                                     const std::function<void(size_t, size_t, const void*)>& on_piece, bool rotate) {
  if (c.StreamOrdered()) {
    // NCCL: one grouped send/receive pair and the reduction enqueued behind it on the stream; the
    // host never waits (requests are dropped, their events released).
    const double t0 = NowSeconds();
    RequestPtr s, r;
    {
      trace::Span span("send+recv", trace::Category::kComm);
      span.With("send_bytes", static_cast<int64_t>(send_bytes)).With("recv_bytes", static_cast<int64_t>(recv_bytes));
      c.GroupStart();
      if (send_bytes) s = c.ISend(send, send_bytes, to, 0);
      if (recv_bytes) r = c.IRecv(recv, recv_bytes, from, 0);
      c.GroupEnd();
    }
    if (on_piece && recv_bytes) {
      trace::Span span("reduce", trace::Category::kCompute);
      span.With("bytes", static_cast<int64_t>(recv_bytes));
      on_piece(0, recv_bytes, recv);
    }
    counters.wire_bytes += static_cast<double>(send_bytes);
    counters.comm_s += NowSeconds() - t0;
    return;
  }
  const size_t piece = PieceBytes();
  const size_t ns = (send_bytes + piece - 1) / piece, nr = (recv_bytes + piece - 1) / piece;
  const size_t window = static_cast<size_t>(std::max(1, cfg.in_flight));
  // Piece i lands in slot i % slots: piece i + window is posted before piece i's on_piece runs, so
  // window + 1 slots keep every slot's bytes until they were used.
  const size_t slots = rotate && RotatesPieces(c) ? window + 1 : nr;
  auto landing = [&](size_t i) { return static_cast<uint8_t*>(recv) + (i % std::max<size_t>(slots, 1)) * piece; };
  std::deque<RequestPtr> sends;
  std::deque<std::pair<RequestPtr, size_t>> recvs;
  size_t next_s = 0, next_r = 0;
  const double t0 = NowSeconds();
  double reduce_s = 0;
  // Pieces are numbered modulo the transport's tag range (MPI guarantees only 32767); same-tag
  // messages between two ranks are matched in order, so a wrapped number cannot be confused.
  const int64_t tags = static_cast<int64_t>(c.MaxTag()) + 1;
  auto post_recv = [&] {
    const size_t off = next_r * piece, len = std::min(piece, recv_bytes - off);
    recvs.emplace_back(c.IRecv(landing(next_r), len, from, static_cast<int>(static_cast<int64_t>(next_r) % tags)),
                       next_r);
    ++next_r;
  };
  auto post_send = [&] {
    const size_t off = next_s * piece, len = std::min(piece, send_bytes - off);
    // Posting a send may move the bytes (the local transport copies into the peer's mailbox).
    trace::Span span("send", trace::Category::kComm);
    span.With("bytes", static_cast<int64_t>(len)).With("peer", to);
    sends.push_back(c.ISend(static_cast<const uint8_t*>(send) + off, len, to,
                            static_cast<int>(static_cast<int64_t>(next_s) % tags)));
    ++next_s;
  };
  while (next_r < nr && recvs.size() < window) post_recv();
  while (next_s < ns && sends.size() < window) post_send();
  while (!recvs.empty() || !sends.empty()) {
    if (!recvs.empty()) {
      auto [req, idx] = std::move(recvs.front());
      recvs.pop_front();
      {
        // The piece's transfer and any wait for the peer to send it.
        trace::Span span("recv", trace::Category::kComm);
        span.With("bytes", static_cast<int64_t>(std::min(piece, recv_bytes - idx * piece))).With("peer", from);
        c.Wait(*req);
      }
      if (next_r < nr) post_recv();
      if (on_piece) {
        const double r0 = NowSeconds();
        trace::Span span("reduce", trace::Category::kCompute);
        span.With("bytes", static_cast<int64_t>(std::min(piece, recv_bytes - idx * piece)));
        on_piece(idx * piece, std::min(piece, recv_bytes - idx * piece), landing(idx));
        reduce_s += NowSeconds() - r0;
      }
    }
    if (!sends.empty() && (recvs.empty() || sends.size() >= window)) {
      {
        trace::Span span("send wait", trace::Category::kComm);
        c.Wait(*sends.front());
      }
      sends.pop_front();
      if (next_s < ns) post_send();
    }
  }
  counters.wire_bytes += static_cast<double>(send_bytes);
  counters.reduce_s += reduce_s;
  counters.comm_s += NowSeconds() - t0 - reduce_s;
}

void AllReduceEngine::Impl::RingReduceScatter(Communicator& c, const float* src, float* data, size_t n, size_t align) {
  const int p = c.Size(), r = c.Rank();
  if (p == 1) {
    if (src != data) CopyBytesAsync(data, kind, src, kind, n * 4, c.Stream());
    return;
  }
  trace::Span span("reduce-scatter", trace::Category::kPhase);
  span.With("bytes", static_cast<int64_t>(n * 4)).With("ranks", p);
  size_t max_chunk = 0;
  for (int i = 0; i < p; ++i) max_chunk = std::max(max_chunk, ChunkOf(n, p, i, align).size());
  // The received pieces rotate through a few cache-sized slots where the transport allows it.
  float* tmp = Scratch<float>(0, RecvScratchBytes(c, max_chunk * 4, true));
  // Out of place, a result larger than the last-level cache is written around it: nothing reads it
  // before the allgather sends it, and the cache would first read every line it writes.
  const bool uncached = src != data && (n - ChunkOf(n, p, (r + 1) % p, align).size()) * 4 >
                                           (cfg.uncached_bytes ? cfg.uncached_bytes : LastLevelCacheBytes());
  for (int s = 0; s < p - 1; ++s) {
    const Range sc = ChunkOf(n, p, (r - s + p) % p, align), rc = ChunkOf(n, p, (r - s - 1 + 2 * p) % p, align);
    const float* from = s == 0 ? src : data;  // later steps send what this rank reduced the step before
    Exchange(
        c, from + sc.begin, sc.size() * 4, (r + 1) % p, tmp, rc.size() * 4, (r - 1 + p) % p,
        [&](size_t off, size_t bytes, const void* got) {
          const size_t at = rc.begin + off / 4;
          const float* x = static_cast<const float*>(got);
          if (src == data) {
            AddInPlace(data + at, x, bytes / 4, c.Stream());
          } else if (uncached) {
            AddToUncached(data + at, src + at, x, bytes / 4, c.Stream());
          } else {
            AddTo(data + at, src + at, x, bytes / 4, c.Stream());
          }
        },
        true);
  }
}

void AllReduceEngine::Impl::RingAllGather(Communicator& c, float* data, size_t n, size_t align) {
  const int p = c.Size(), r = c.Rank();
  if (p == 1) return;
  trace::Span span("allgather", trace::Category::kPhase);
  span.With("bytes", static_cast<int64_t>(n * 4)).With("ranks", p);
  for (int s = 0; s < p - 1; ++s) {
    const Range sc = ChunkOf(n, p, (r + 1 - s + p) % p, align), rc = ChunkOf(n, p, (r - s + p) % p, align);
    Exchange(c, data + sc.begin, sc.size() * 4, (r + 1) % p, data + rc.begin, rc.size() * 4, (r - 1 + p) % p, nullptr);
  }
}

void AllReduceEngine::Impl::RingAllGatherBytes(Communicator& c, uint8_t* buf, const std::vector<size_t>& offsets,
                                               const std::vector<size_t>& sizes, int shift) {
  const int p = c.Size(), r = c.Rank();
  if (p == 1) return;
  trace::Span span("allgather", trace::Category::kPhase);
  span.With("ranks", p);
  for (int s = 0; s < p - 1; ++s) {
    const int sb = (r + shift - s + 2 * p) % p, rb = (r + shift - s - 1 + 2 * p) % p;
    Exchange(c, buf + offsets[sb], sizes[sb], (r + 1) % p, buf + offsets[rb], sizes[rb], (r - 1 + p) % p, nullptr);
  }
}

void AllReduceEngine::Impl::QuantiseContribution(float* data, size_t n, CodecState* st) {
  if (!st || !codec.spec().error_feedback) return;
  const double t0 = NowSeconds();
  uint8_t* wire = Scratch(1, codec.WireBytes(n));
  {
    trace::Span span("encode", trace::Category::kCompute);
    span.With("bytes", static_cast<int64_t>(n * 4)).With("wire_bytes", static_cast<int64_t>(codec.WireBytes(n)));
    codec.Encode(data, n, wire, st, c_stream());
  }
  const uint64_t step = st->step - 1;
  {
    trace::Span span("decode", trace::Category::kCompute);
    span.With("bytes", static_cast<int64_t>(n * 4));
    codec.Decode(wire, n, data, step, c_stream());
  }
  counters.encode_s += NowSeconds() - t0;
}

}  // namespace ciuic
