#pragma once
// Internal to collectives/algorithms: the engine's state and the hop helpers every algorithm file
// shares (chunking, the pipelined point-to-point hop, the ring's two halves, the byte-block ring
// allgather, the one-time quantisation of a rank's own contribution). One file per algorithm defines
// its entry point on AllReduceEngine::Impl; allreduce.cc builds the engine and dispatches.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "collectives/algorithms/allreduce.h"
#include "core/buffer.h"

namespace ciuic {
namespace hops {

// Whether the codec has the fused decode-add-encode hop the compressed ring and hier run on.
inline bool HasHop(CodecKind k) {
  return k == CodecKind::kFp16 || k == CodecKind::kBf16 || CodecIsBlockScaled(k) || k == CodecKind::kSign1;
}

// Chunk c of P over n elements, boundaries on multiples of `align` elements.
struct Range {
  size_t begin, end;
  size_t size() const { return end - begin; }
};
inline Range ChunkOf(size_t n, int parts, int c, size_t align) {
  const size_t units = (n + align - 1) / align;
  const size_t b = units * static_cast<size_t>(c) / static_cast<size_t>(parts);
  const size_t e = units * static_cast<size_t>(c + 1) / static_cast<size_t>(parts);
  return {std::min(n, b * align), std::min(n, e * align)};
}

}  // namespace hops

struct AllReduceEngine::Impl {
  Communicator& comm;
  const AlgoConfig& cfg;
  const Codec& codec;
  Counters& counters;
  MemoryKind kind;
  std::map<int, Buffer> scratch;
  uint64_t hop_step = 0;
  // hier: levels[i] = (intra, inter) communicators of level i, made once (Split is collective).
  std::vector<std::pair<std::unique_ptr<Communicator>, std::unique_ptr<Communicator>>> levels;

  Impl(Communicator& c, const AlgoConfig& g, const Codec& k, Counters& n)
      : comm(c), cfg(g), codec(k), counters(n), kind(c.BufferKind()) {}

  template <class T = uint8_t>
  T* Scratch(int slot, size_t bytes) {
    Buffer& b = scratch[slot];
    if (b.bytes() < bytes || b.kind() != kind) b = Buffer(std::max<size_t>(bytes, 64), kind);
    return b.as<T>();
  }
  void* c_stream() const { return comm.Stream(); }

  // ---- hop helpers (hops.cc) ----------------------------------------------------------------------
  // Sends send_bytes to `to` while receiving recv_bytes from `from`, in pieces of cfg.piece_bytes with
  // at most cfg.in_flight of each outstanding; on_piece(offset, bytes, at) runs as each received piece
  // lands at `at`. A piece lands at recv + offset, or, with `rotate` where RotatesPieces(c), in a
  // window of in_flight + 1 piece slots that the pieces reuse in turn (a slot is reused only after its
  // on_piece ran): a reduction then reads its pieces while they are still in cache, and the scratch
  // is RecvScratchBytes, not the message.
  void Exchange(Communicator& c, const void* send, size_t send_bytes, int to, void* recv, size_t recv_bytes, int from,
                const std::function<void(size_t, size_t, const void*)>& on_piece, bool rotate = false);
  // Whether Exchange may rotate received pieces on `c`: host memory on a transport whose receive is
  // done when Wait returns, and an on_piece that has finished with a piece when it returns.
  bool RotatesPieces(const Communicator& c) const { return kind == MemoryKind::kHost && !c.StreamOrdered(); }
  size_t PieceBytes() const { return std::max<size_t>(cfg.piece_bytes, 4096) / 64 * 64; }
  // The receive buffer Exchange needs for recv_bytes (rotating where it can).
  size_t RecvScratchBytes(const Communicator& c, size_t recv_bytes, bool rotate) const {
    if (!rotate || !RotatesPieces(c)) return recv_bytes;
    return std::min(recv_bytes, PieceBytes() * static_cast<size_t>(std::max(1, cfg.in_flight) + 1));
  }
  // Uncompressed ring halves over chunks aligned to `align` elements.
  // Out of place when src != data: step 0 sends from src and every reduction writes
  // data = src + received, so src is read once and no copy pass is made (the chunk a rank sends
  // first is written to data only by the allgather).
  void RingReduceScatter(Communicator& c, float* data, size_t n, size_t align) {
    RingReduceScatter(c, data, data, n, align);
  }
  void RingReduceScatter(Communicator& c, const float* src, float* data, size_t n, size_t align);
  // After RingReduceScatter rank r owns chunk (r + 1) % P; this spreads every chunk to every rank.
  void RingAllGather(Communicator& c, float* data, size_t n, size_t align);
  // Allgather of variable-size byte blocks (block i at offsets[i], size sizes[i]) around the ring,
  // rank r contributing block (r + shift) % P.
  void RingAllGatherBytes(Communicator& c, uint8_t* buf, const std::vector<size_t>& offsets,
                          const std::vector<size_t>& sizes, int shift);
  // The rank's own contribution quantised once with its residual: data = decode(encode(data + r)).
  void QuantiseContribution(float* data, size_t n, CodecState* st);

  // ---- algorithms, one file each ------------------------------------------------------------------
  void Ring(Communicator& c, float* data, size_t n) { Ring(c, data, data, n); }
  void Ring(Communicator& c, const float* src, float* data, size_t n);                             // ring.cc
  void CompressedRing(Communicator& c, float* data, size_t n, CodecState* st, bool pre_quantise);  // ring.cc
  // The uncompressed ring over shared windows; false (nothing done) unless every rank's source and
  // result lie in one window (decided alike on every rank, by the window's id). Their owners keep
  // them alive: a rank whose buffers lie in a window still holds it.
  std::vector<std::weak_ptr<const SharedWindow>> windows;
  bool MappedRing(Communicator& c, const float* src, float* data, size_t n);  // mapped.cc
  // The uncompressed ring on one host up to cfg.staged_bytes, through a shared window of the
  // engine's own; false (nothing done) where it does not apply or the window cannot be made.
  std::shared_ptr<SharedWindow> staging;
  size_t staging_slot = 0;    // bytes per slot; two slots per rank
  size_t staging_parity = 0;  // which slot this call uses
  bool staging_failed = false;
  bool StagedRing(Communicator& c, const float* src, float* data, size_t n);      // staged.cc
  void RecursiveDoubling(Communicator& c, float* data, size_t n);                 // rd.cc
  void MakeHierarchy();                                                           // hier.cc
  void HierLevel(size_t level, float* data, size_t n, size_t align, bool lossy);  // hier.cc
  float* hier_base = nullptr;  // the tensor a hier call reduces (topk: its chunk's residual offset)
  size_t hier_n = 0;
  CodecState* hier_state = nullptr;
  void Hierarchical(float* data, size_t n, CodecState* st);  // hier.cc
  void Sparse(float* data, size_t n, CodecState* st);        // sparse.cc
  // Sparse over `c` on data[0, n): a slice at residual_offset of the tensor of tensor_n elements
  // whose state `st` is.
  void SparseOn(Communicator& c, float* data, size_t n, CodecState* st, size_t residual_offset,
                size_t tensor_n);                            // sparse.cc
  void RandomK(float* data, size_t n, CodecState* st);       // randomk.cc
  void TwoPhaseSign(float* data, size_t n, CodecState* st);  // sign2.cc
  void PowerSgd(float* data, size_t n, CodecState* st);      // powersgd.cc
  // Returns true when the result is already averaged.
  bool Native(const float* src, float* data, size_t n, bool average);  // out of place in fp32 only // native.cc
};

}  // namespace ciuic
