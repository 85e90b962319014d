#include "collectives/algorithms/allreduce.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <map>

#include "core/error.h"
#include "core/timer.h"
#include "kernels/codec_kernels.h"

namespace ciuic {

const char* AlgoName(AllReduceAlgo a) {
  switch (a) {
    case AllReduceAlgo::kAuto: return "auto";
    case AllReduceAlgo::kRing: return "ring";
    case AllReduceAlgo::kRecursiveDoubling: return "rd";
    case AllReduceAlgo::kHierarchical: return "hier";
    case AllReduceAlgo::kSparse: return "sparse";
    case AllReduceAlgo::kTwoPhaseSign: return "sign2";
    case AllReduceAlgo::kPowerSgd: return "powersgd";
    case AllReduceAlgo::kNative: return "native";
  }
  return "?";
}

AllReduceAlgo ParseAlgo(std::string_view text) {
  for (AllReduceAlgo a : {AllReduceAlgo::kAuto, AllReduceAlgo::kRing, AllReduceAlgo::kRecursiveDoubling,
                          AllReduceAlgo::kHierarchical, AllReduceAlgo::kSparse, AllReduceAlgo::kTwoPhaseSign,
                          AllReduceAlgo::kPowerSgd, AllReduceAlgo::kNative})
    if (text == AlgoName(a)) return a;
  throw UsageError(fmt::format("unknown algorithm '{}' (auto ring rd hier sparse sign2 powersgd native)", text));
}

DType ParsePrecision(std::string_view text) {
  if (text == "fp32") return DType::kFloat32;
  if (text == "bf16") return DType::kBFloat16;
  if (text == "fp16") return DType::kFloat16;
  throw UsageError(fmt::format("unknown reduction precision '{}' (fp32 bf16 fp16)", text));
}

AllReduceAlgo DefaultAlgo(CodecKind codec) {
  switch (codec) {
    case CodecKind::kTopK: return AllReduceAlgo::kSparse;
    case CodecKind::kSign1: return AllReduceAlgo::kTwoPhaseSign;
    case CodecKind::kPowerSgd: return AllReduceAlgo::kPowerSgd;
    default: return AllReduceAlgo::kRing;  // randomk runs its values through the ring
  }
}

namespace {

bool HasHop(CodecKind k) {
  return k == CodecKind::kFp16 || k == CodecKind::kBf16 || CodecIsBlockScaled(k) || k == CodecKind::kSign1;
}

// Chunk c of P over n elements, boundaries on multiples of `align` elements.
struct Range {
  size_t begin, end;
  size_t size() const { return end - begin; }
};
Range ChunkOf(size_t n, int parts, int c, size_t align) {
  const size_t units = (n + align - 1) / align;
  const size_t b = units * static_cast<size_t>(c) / static_cast<size_t>(parts);
  const size_t e = units * static_cast<size_t>(c + 1) / static_cast<size_t>(parts);
  return {std::min(n, b * align), std::min(n, e * align)};
}

}  // namespace

struct AllReduceEngine::Impl {
  Communicator& comm;
  const AlgoConfig& cfg;
  const Codec& codec;
  Counters& counters;
  MemoryKind kind;
  std::map<int, Buffer> scratch;
  uint64_t hop_step = 0;

  Impl(Communicator& c, const AlgoConfig& g, const Codec& k, Counters& n)
      : comm(c), cfg(g), codec(k), counters(n), kind(c.BufferKind()) {}

  template <class T = uint8_t>
  T* Scratch(int slot, size_t bytes) {
    Buffer& b = scratch[slot];
    if (b.bytes() < bytes || b.kind() != kind) b = Buffer(std::max<size_t>(bytes, 64), kind);
    return b.as<T>();
  }

  // Sends send_bytes to `to` while receiving recv_bytes from `from`, in pieces of cfg.piece_bytes with
  // at most cfg.in_flight of each outstanding; on_piece(offset, bytes) runs as each received piece lands.
  void Exchange(Communicator& c, const void* send, size_t send_bytes, int to, void* recv, size_t recv_bytes, int from,
                const std::function<void(size_t, size_t)>& on_piece) {
    if (c.StreamOrdered()) {
      // NCCL: one grouped send/receive pair and the reduction enqueued behind it on the stream; the
      // host never waits (requests are dropped, their events released).
      const double t0 = NowSeconds();
      c.GroupStart();
      RequestPtr s, r;
      if (send_bytes) s = c.ISend(send, send_bytes, to, 0);
      if (recv_bytes) r = c.IRecv(recv, recv_bytes, from, 0);
      c.GroupEnd();
      if (on_piece && recv_bytes) on_piece(0, recv_bytes);
      counters.wire_bytes += static_cast<double>(send_bytes);
      counters.comm_s += NowSeconds() - t0;
      return;
    }
    const size_t piece = std::max<size_t>(cfg.piece_bytes, 4096) / 64 * 64;
    const size_t ns = (send_bytes + piece - 1) / piece, nr = (recv_bytes + piece - 1) / piece;
    const size_t window = static_cast<size_t>(std::max(1, cfg.in_flight));
    std::deque<RequestPtr> sends;
    std::deque<std::pair<RequestPtr, size_t>> recvs;
    size_t next_s = 0, next_r = 0;
    const double t0 = NowSeconds();
    double reduce_s = 0;
    auto post_recv = [&] {
      const size_t off = next_r * piece, len = std::min(piece, recv_bytes - off);
      recvs.emplace_back(c.IRecv(static_cast<uint8_t*>(recv) + off, len, from, static_cast<int>(next_r % 65536)), next_r);
      ++next_r;
    };
    auto post_send = [&] {
      const size_t off = next_s * piece, len = std::min(piece, send_bytes - off);
      sends.push_back(c.ISend(static_cast<const uint8_t*>(send) + off, len, to, static_cast<int>(next_s % 65536)));
      ++next_s;
    };
    while (next_r < nr && recvs.size() < window) post_recv();
    while (next_s < ns && sends.size() < window) post_send();
    while (!recvs.empty() || !sends.empty()) {
      if (!recvs.empty()) {
        auto [req, idx] = std::move(recvs.front());
        recvs.pop_front();
        c.Wait(*req);
        if (next_r < nr) post_recv();
        if (on_piece) {
          const double r0 = NowSeconds();
          on_piece(idx * piece, std::min(piece, recv_bytes - idx * piece));
          reduce_s += NowSeconds() - r0;
        }
      }
      if (!sends.empty() && (recvs.empty() || sends.size() >= window)) {
        c.Wait(*sends.front());
        sends.pop_front();
        if (next_s < ns) post_send();
      }
    }
    counters.wire_bytes += static_cast<double>(send_bytes);
    counters.reduce_s += reduce_s;
    counters.comm_s += NowSeconds() - t0 - reduce_s;
  }

  // ---- uncompressed ring ----------------------------------------------------------------------
  void RingReduceScatter(Communicator& c, float* data, size_t n, size_t align) {
    const int p = c.Size(), r = c.Rank();
    if (p == 1) return;
    size_t max_chunk = 0;
    for (int i = 0; i < p; ++i) max_chunk = std::max(max_chunk, ChunkOf(n, p, i, align).size());
    float* tmp = Scratch<float>(0, max_chunk * 4);
    for (int s = 0; s < p - 1; ++s) {
      const Range sc = ChunkOf(n, p, (r - s + p) % p, align), rc = ChunkOf(n, p, (r - s - 1 + 2 * p) % p, align);
      Exchange(c, data + sc.begin, sc.size() * 4, (r + 1) % p, tmp, rc.size() * 4, (r - 1 + p) % p,
               [&](size_t off, size_t bytes) {
                 AddInPlace(data + rc.begin + off / 4, tmp + off / 4, bytes / 4, c.Stream());
               });
    }
  }
  // After RingReduceScatter rank r owns chunk (r + 1) % P; this spreads every chunk to every rank.
  void RingAllGather(Communicator& c, float* data, size_t n, size_t align) {
    const int p = c.Size(), r = c.Rank();
    for (int s = 0; s < p - 1; ++s) {
      const Range sc = ChunkOf(n, p, (r + 1 - s + p) % p, align), rc = ChunkOf(n, p, (r - s + p) % p, align);
      Exchange(c, data + sc.begin, sc.size() * 4, (r + 1) % p, data + rc.begin, rc.size() * 4, (r - 1 + p) % p,
               nullptr);
    }
  }
  void Ring(Communicator& c, float* data, size_t n) {
    RingReduceScatter(c, data, n, 1);
    RingAllGather(c, data, n, 1);
  }

  // Allgather of variable-size byte blocks (block i at offsets[i], size sizes[i]) around the ring,
  // rank r contributing block (r + shift) % P.
  void RingAllGatherBytes(Communicator& c, uint8_t* buf, const std::vector<size_t>& offsets,
                          const std::vector<size_t>& sizes, int shift) {
    const int p = c.Size(), r = c.Rank();
    for (int s = 0; s < p - 1; ++s) {
      const int sb = (r + shift - s + 2 * p) % p, rb = (r + shift - s - 1 + 2 * p) % p;
      Exchange(c, buf + offsets[sb], sizes[sb], (r + 1) % p, buf + offsets[rb], sizes[rb], (r - 1 + p) % p, nullptr);
    }
  }

  // The rank's own contribution quantised once with its residual: data = decode(encode(data + r)).
  void QuantiseContribution(float* data, size_t n, CodecState* st) {
    if (!st || !codec.spec().error_feedback) return;
    const double t0 = NowSeconds();
    uint8_t* wire = Scratch(1, codec.WireBytes(n));
    codec.Encode(data, n, wire, st, c_stream());
    const uint64_t step = st->step - 1;
    codec.Decode(wire, n, data, step, c_stream());
    counters.encode_s += NowSeconds() - t0;
  }
  void* c_stream() const { return comm.Stream(); }

  // ---- compressed ring ------------------------------------------------------------------------
  void CompressedRing(Communicator& c, float* data, size_t n, CodecState* st, bool pre_quantise) {
    if (pre_quantise) QuantiseContribution(data, n, st);
    const int p = c.Size(), r = c.Rank();
    if (p == 1) return;
    const size_t align = CodecIsBlockScaled(codec.spec().kind) || codec.spec().kind == CodecKind::kSign1
                             ? codec.spec().block
                             : 1;
    std::vector<size_t> off(p), sz(p);
    size_t total = 0, max_wire = 0;
    for (int i = 0; i < p; ++i) {
      const Range ch = ChunkOf(n, p, i, align);
      off[i] = total;
      sz[i] = codec.WireBytes(ch.size());
      total += sz[i];
      max_wire = std::max(max_wire, sz[i]);
    }
    uint8_t* wires = Scratch(2, total + 16);  // the allgathered wires, chunk by chunk
    uint8_t* send = Scratch(3, max_wire + 16);
    uint8_t* recv = Scratch(4, max_wire + 16);
    const QuantArgs base = codec.Args(0);
    const uint64_t step = hop_step++;
    QuantArgs a = base;
    a.step = step * 1024;
    a.stochastic = false;  // hops round to nearest: the rank's own rounding already happened
    const double t0 = NowSeconds();
    {
      const Range first = ChunkOf(n, p, r, align);
      QuantEncode(a, data + first.begin, nullptr, first.size(), send, nullptr, c.Stream());
    }
    counters.encode_s += NowSeconds() - t0;
    for (int s = 0; s < p - 1; ++s) {
      const int sc = (r - s + p) % p, rcn = (r - s - 1 + 2 * p) % p;
      const Range rc = ChunkOf(n, p, rcn, align);
      Exchange(c, send, sz[sc], (r + 1) % p, recv, sz[rcn], (r - 1 + p) % p, nullptr);
      const double t1 = NowSeconds();
      uint8_t* out = s == p - 2 ? wires + off[rcn] : send;
      QuantDecodeAddEncode(a, recv, data + rc.begin, rc.size(), out, nullptr, c.Stream());
      counters.encode_s += NowSeconds() - t1;
    }
    RingAllGatherBytes(c, wires, off, sz, 1);
    const double t2 = NowSeconds();
    for (int i = 0; i < p; ++i) {
      const Range ch = ChunkOf(n, p, i, align);
      QuantDecode(a, wires + off[i], ch.size(), data + ch.begin, false, c.Stream());
    }
    counters.encode_s += NowSeconds() - t2;
  }

  // ---- recursive halving / doubling -----------------------------------------------------------
  void RecursiveDoubling(Communicator& c, float* data, size_t n) {
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
      AddInPlace(data, tmp, n, c.Stream());
    }
    // Recursive halving: keep shrinking [lo, hi) to the half this rank owns.
    size_t lo = 0, hi = n;
    std::vector<std::pair<size_t, size_t>> kept;
    for (int mask = p2 / 2; mask >= 1; mask /= 2) {
      const int partner = r ^ mask;
      const size_t mid = lo + (hi - lo) / 2;
      const bool upper = (r & mask) != 0;
      const size_t keep_lo = upper ? mid : lo, keep_hi = upper ? hi : mid;
      const size_t give_lo = upper ? lo : mid, give_hi = upper ? mid : hi;
      Exchange(c, data + give_lo, (give_hi - give_lo) * 4, partner, tmp, (keep_hi - keep_lo) * 4, partner,
               [&](size_t off, size_t bytes) { AddInPlace(data + keep_lo + off / 4, tmp + off / 4, bytes / 4, c.Stream()); });
      kept.emplace_back(lo, hi);
      lo = keep_lo;
      hi = keep_hi;
    }
    // Recursive doubling: give back the owned part, receive the partner's, in reverse order.
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

  // ---- hierarchical ---------------------------------------------------------------------------
  // levels[i]: (intra, inter) communicators of level i, made once (Split is collective).
  std::vector<std::pair<std::unique_ptr<Communicator>, std::unique_ptr<Communicator>>> levels;

  void MakeHierarchy() {
    if (!levels.empty()) return;
    int node;
    if (cfg.ranks_per_node > 0) {
      node = comm.Rank() / cfg.ranks_per_node;
    } else {
      const auto hosts = GatherHostnames(comm);
      std::vector<std::string> uniq;
      for (const auto& h : hosts)
        if (std::find(uniq.begin(), uniq.end(), h) == uniq.end()) uniq.push_back(h);
      node = static_cast<int>(std::find(uniq.begin(), uniq.end(), hosts[comm.Rank()]) - uniq.begin());
    }
    Communicator* c = &comm;
    int color = node;
    const int depth = cfg.nodes_per_group > 0 ? 3 : 2;
    for (int level = 0; level + 1 < depth; ++level) {
      auto intra = c->Split(color, c->Rank());
      double sizes[2] = {static_cast<double>(intra->Size()), -static_cast<double>(intra->Size())};
      c->HostAllReduce(sizes, 2, ReduceOp::kMax);
      if (sizes[0] != -sizes[1])
        throw UsageError(fmt::format("hier needs groups of equal size: {} ranks split into groups of {} to {} ranks",
                                     c->Size(), -sizes[1], sizes[0]));
      auto inter = c->Split(intra->Rank(), c->Rank());
      levels.emplace_back(std::move(intra), std::move(inter));
      c = levels.back().second.get();
      color = c->Rank() / std::max(1, cfg.nodes_per_group);
    }
  }
  void HierLevel(size_t level, float* data, size_t n, size_t align, bool lossy) {
    if (level == levels.size()) {
      Communicator& top = level == 0 ? comm : *levels[level - 1].second;
      if (top.Size() == 1) return;
      if (lossy) {
        CompressedRing(top, data, n, nullptr, false);
      } else {
        Ring(top, data, n);
      }
      return;
    }
    Communicator& intra = *levels[level].first;
    const int lp = intra.Size(), lr = intra.Rank();
    RingReduceScatter(intra, data, n, align);
    // Rank lr owns chunk (lr + 1) % lp; the ranks holding that chunk in every group form `inter`.
    const Range own = ChunkOf(n, lp, (lr + 1) % lp, align);
    HierLevel(level + 1, data + own.begin, own.size(), align, lossy);
    RingAllGather(intra, data, n, align);
  }
  void Hierarchical(float* data, size_t n, CodecState* st) {
    MakeHierarchy();
    const bool lossy = codec.spec().kind != CodecKind::kNone;
    if (lossy) QuantiseContribution(data, n, st);
    const size_t align = lossy && HasHop(codec.spec().kind) && codec.spec().kind != CodecKind::kFp16 &&
                                 codec.spec().kind != CodecKind::kBf16
                             ? codec.spec().block
                             : 1;
    HierLevel(0, data, n, align, lossy);
  }

  // ---- sparse allgather (topk) ----------------------------------------------------------------
  void Sparse(float* data, size_t n, CodecState* st) {
    const int p = comm.Size();
    const size_t wb = codec.WireBytes(n);
    uint8_t* wires = Scratch(2, wb * static_cast<size_t>(p) + 16);
    const double t0 = NowSeconds();
    codec.Encode(data, n, wires + wb * static_cast<size_t>(comm.Rank()), st, comm.Stream());
    counters.encode_s += NowSeconds() - t0;
    std::vector<size_t> off(p), sz(p, wb);
    for (int i = 0; i < p; ++i) off[i] = wb * static_cast<size_t>(i);
    RingAllGatherBytes(comm, wires, off, sz, 0);
    const double t1 = NowSeconds();
    const size_t k = codec.SparseK(n);
    SparseDecode(wires, k, n, data, false, comm.Stream());
    for (int i = 1; i < p; ++i) SparseDecode(wires + off[i], k, n, data, true, comm.Stream());
    counters.encode_s += NowSeconds() - t1;
  }

  // ---- randomk: the shared-index values through the ring ----------------------------------------
  void RandomK(float* data, size_t n, CodecState* st) {
    const size_t k = codec.SparseK(n);
    float* values = Scratch<float>(2, k * 4 + 16);
    const double t0 = NowSeconds();
    codec.Encode(data, n, values, st, comm.Stream());
    const uint64_t step = st ? st->step - 1 : 0;
    counters.encode_s += NowSeconds() - t0;
    Ring(comm, values, k);
    codec.Decode(values, n, data, step, comm.Stream());
  }

  // ---- two-phase sign1 --------------------------------------------------------------------------
  void TwoPhaseSign(float* data, size_t n, CodecState* st) {
    const int p = comm.Size(), r = comm.Rank();
    const uint32_t block = codec.spec().block;
    if (!st) throw UsageError("sign2 keeps worker and server error feedback: it needs a codec state");
    codec.Prepare(*st, n, kind);
    if (st->residual.bytes() == 0) {
      st->residual = Buffer(std::max<size_t>(n, 1) * 4, kind);
      SetBytes(st->residual.data(), kind, 0, n * 4);
    }
    std::vector<size_t> off(p), sz(p);
    size_t total = 0;
    for (int i = 0; i < p; ++i) {
      off[i] = total;
      sz[i] = QuantWireBytes(codec.Args(0), ChunkOf(n, p, i, block).size());
      total += sz[i];
    }
    const Range mine = ChunkOf(n, p, r, block);
    if (st->server_residual.bytes() == 0) {
      st->server_residual = Buffer(std::max<size_t>(mine.size(), 1) * 4, kind);
      SetBytes(st->server_residual.data(), kind, 0, mine.size() * 4);
    }
    uint8_t* worker = Scratch(2, total + 16);
    uint8_t* gathered = Scratch(3, sz[r] * static_cast<size_t>(p) + 16);
    uint8_t* server = Scratch(4, total + 16);
    const QuantArgs a = codec.Args(st->step++);
    auto* flag = st->flag.as<uint32_t>();
    const double t0 = NowSeconds();
    for (int i = 0; i < p; ++i) {
      const Range ch = ChunkOf(n, p, i, block);
      QuantEncode(a, data + ch.begin, st->residual.as<float>() + ch.begin, ch.size(), worker + off[i], flag,
                  comm.Stream());
    }
    codec.CheckFlag(*st);
    counters.encode_s += NowSeconds() - t0;
    // Phase 1: chunk i's wire to rank i (all-to-all of point-to-point pairs, ring order).
    CopyBytes(gathered + sz[r] * static_cast<size_t>(r), kind, worker + off[r], kind, sz[r]);
    for (int s = 1; s < p; ++s) {
      const int to = (r + s) % p, from = (r - s + p) % p;
      Exchange(comm, worker + off[to], sz[to], to, gathered + sz[r] * static_cast<size_t>(from), sz[r], from, nullptr);
    }
    // Server: sum the P wires of its chunk in rank order, add its residual, re-encode.
    float* sum = Scratch<float>(5, mine.size() * 4 + 16);
    const double t1 = NowSeconds();
    QuantDecode(a, gathered, mine.size(), sum, false, comm.Stream());
    for (int i = 1; i < p; ++i)
      QuantDecode(a, gathered + sz[r] * static_cast<size_t>(i), mine.size(), sum, true, comm.Stream());
    QuantEncode(a, sum, st->server_residual.as<float>(), mine.size(), server + off[r], flag, comm.Stream());
    counters.encode_s += NowSeconds() - t1;
    // Phase 2: allgather the server wires; everyone decodes the same bytes.
    RingAllGatherBytes(comm, server, off, sz, 0);
    for (int i = 0; i < p; ++i) {
      const Range ch = ChunkOf(n, p, i, block);
      QuantDecode(a, server + off[i], ch.size(), data + ch.begin, false, comm.Stream());
    }
  }

  // ---- PowerSGD -----------------------------------------------------------------------------------
  void PowerSgd(float* data, size_t n, CodecState* st) {
    if (!st) throw UsageError("powersgd keeps a warm-start Q and error feedback: it needs a codec state");
    codec.Prepare(*st, n, kind);
    const int rank = codec.spec().rank;
    const MatrixView v = PowerSgdView(n);
    float* m = st->scratch.as<float>();
    float* p = Scratch<float>(2, v.rows * rank * 4 + 16);
    float* q = Scratch<float>(3, v.cols * rank * 4 + 16);
    float* residual = codec.spec().error_feedback ? st->residual.as<float>() : nullptr;
    const double t0 = NowSeconds();
    CopyBytes(m, kind, data, kind, n * 4);
    if (residual) AddInPlace(m, residual, n, comm.Stream());
    auto* flag = st->flag.as<uint32_t>();
    UnscaleCheckNorm(m, n, 1.0f, flag, nullptr, comm.Stream());
    codec.CheckFlag(*st);
    PowerSgdMulQ(m, n, st->q.as<float>(), rank, p, comm.Stream());
    counters.encode_s += NowSeconds() - t0;
    Ring(comm, p, v.rows * rank);
    const double t1 = NowSeconds();
    PowerSgdOrthonormalize(p, v.rows, rank, comm.Stream());
    PowerSgdMulP(m, n, p, rank, q, comm.Stream());
    if (residual) {
      // residual = M - P·Q_localᵀ: exactly what this rank's Q adds to the aggregate.
      CopyBytes(residual, kind, m, kind, n * 4);
      ScaleInPlace(residual, n, -1.0f, comm.Stream());
      PowerSgdReconstruct(p, q, n, rank, residual, true, comm.Stream());
      ScaleInPlace(residual, n, -1.0f, comm.Stream());
    }
    counters.encode_s += NowSeconds() - t1;
    Ring(comm, q, v.cols * rank);
    PowerSgdReconstruct(p, q, n, rank, data, false, comm.Stream());
    CopyBytes(st->q.data(), kind, q, kind, v.cols * rank * 4);
    ++st->step;
  }

  // ---- the transport's own allreduce, in fp32 or a 16-bit precision ------------------------------
  // Returns true when the result is already averaged.
  bool Native(float* data, size_t n, bool average) {
    const int p = comm.Size();
    if (cfg.precision == DType::kFloat32) {
      const double t0 = NowSeconds();
      comm.AllReduce(data, data, n, DType::kFloat32, average ? ReduceOp::kAvg : ReduceOp::kSum);
      counters.comm_s += NowSeconds() - t0;
      counters.wire_bytes += 2.0 * (p - 1) / p * static_cast<double>(n) * 4;
      return true;
    }
    // Cast with 1/P pre-scaling (a 16-bit sum of P values cannot overflow where their mean does not),
    // sum in 16 bits, cast back: ÷(1/P) restores a sum, prescale 1 leaves the mean.
    QuantArgs enc;
    enc.kind = cfg.precision == DType::kFloat16 ? CodecKind::kFp16 : CodecKind::kBf16;
    enc.prescale = 1.0f / static_cast<float>(p);
    auto* wire = Scratch(0, n * 2);
    double t0 = NowSeconds();
    QuantEncode(enc, data, nullptr, n, wire, nullptr, comm.Stream());
    double t1 = NowSeconds();
    counters.encode_s += t1 - t0;
    comm.AllReduce(wire, wire, n, cfg.precision, ReduceOp::kSum);
    t0 = NowSeconds();
    counters.comm_s += t0 - t1;
    counters.wire_bytes += 2.0 * (p - 1) / p * static_cast<double>(n) * 2;
    QuantArgs dec = enc;
    if (average) dec.prescale = 1.0f;
    QuantDecode(dec, wire, n, data, false, comm.Stream());
    counters.encode_s += NowSeconds() - t0;
    return true;
  }
};

AllReduceEngine::AllReduceEngine(Communicator& comm, const AlgoConfig& config)
    : comm_(comm), config_(config), algo_(config.algo), codec_(config.codec) {
  if (algo_ == AllReduceAlgo::kAuto) algo_ = DefaultAlgo(config.codec.kind);
  const CodecKind k = config.codec.kind;
  auto refuse = [&] {
    throw UsageError(fmt::format("algorithm {} does not take codec {}", AlgoName(algo_), CodecName(config.codec)));
  };
  switch (algo_) {
    case AllReduceAlgo::kRing:
      if (k != CodecKind::kNone && k != CodecKind::kRandomK && !HasHop(k)) refuse();
      break;
    case AllReduceAlgo::kRecursiveDoubling:
      if (k != CodecKind::kNone) refuse();
      break;
    case AllReduceAlgo::kHierarchical:
      if (k != CodecKind::kNone && !HasHop(k)) refuse();
      break;
    case AllReduceAlgo::kSparse:
      if (k != CodecKind::kTopK) refuse();
      break;
    case AllReduceAlgo::kTwoPhaseSign:
      if (k != CodecKind::kSign1) refuse();
      break;
    case AllReduceAlgo::kPowerSgd:
      if (k != CodecKind::kPowerSgd) refuse();
      break;
    case AllReduceAlgo::kNative:
      if (k != CodecKind::kNone) refuse();
      break;
    case AllReduceAlgo::kAuto: break;
  }
  const DType prec = config.precision;
  if (prec != DType::kFloat32 && prec != DType::kBFloat16 && prec != DType::kFloat16)
    throw UsageError(fmt::format("reduction precision {}: fp32 bf16 fp16", DTypeName(prec)));
  if (prec != DType::kFloat32 && algo_ != AllReduceAlgo::kNative)
    throw UsageError(fmt::format("reduction precision {} applies to the native algorithm; {} accumulates in fp32 "
                                 "(16-bit wires: codec fp16 or bf16)", DTypeName(prec), AlgoName(algo_)));
  impl_ = std::make_unique<Impl>(comm_, config_, codec_, counters_);
}

AllReduceEngine::~AllReduceEngine() = default;

void AllReduceEngine::Run(float* data, size_t n, CodecState* state, bool average) {
  const double t0 = NowSeconds();
  const CodecKind k = config_.codec.kind;
  bool averaged = false;
  if (n > 0) {
    switch (algo_) {
      case AllReduceAlgo::kRing:
        if (k == CodecKind::kNone) {
          impl_->Ring(comm_, data, n);
        } else if (k == CodecKind::kRandomK) {
          impl_->RandomK(data, n, state);
        } else {
          impl_->CompressedRing(comm_, data, n, state, true);
        }
        break;
      case AllReduceAlgo::kRecursiveDoubling: impl_->RecursiveDoubling(comm_, data, n); break;
      case AllReduceAlgo::kHierarchical: impl_->Hierarchical(data, n, state); break;
      case AllReduceAlgo::kSparse: impl_->Sparse(data, n, state); break;
      case AllReduceAlgo::kTwoPhaseSign: impl_->TwoPhaseSign(data, n, state); break;
      case AllReduceAlgo::kPowerSgd: impl_->PowerSgd(data, n, state); break;
      case AllReduceAlgo::kNative: averaged = impl_->Native(data, n, average); break;
      case AllReduceAlgo::kAuto: break;
    }
    if (average && !averaged && comm_.Size() > 1) ScaleInPlace(data, n, 1.0f / static_cast<float>(comm_.Size()), comm_.Stream());
  }
  comm_.Synchronize();
  counters_.calls++;
  counters_.raw_bytes += static_cast<double>(n) * 4;
  counters_.total_s += NowSeconds() - t0;
}

}  // namespace ciuic
