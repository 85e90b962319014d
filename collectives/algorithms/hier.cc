// hier: depth 2 = intra-node reduce-scatter -> inter-node allreduce of the owned chunk (ring,
// compressed when a codec is set) -> intra-node allgather. Nodes come from host names or
// `ranks_per_node`; every group must have the same size. Depth 3 (`nodes_per_group`) repeats the
// pattern one level up. Codecs: none, one with the fused hop, or topk (a sparse allgather of each
// chunk's top-k between nodes). For fast intra-node links in front
// of a slower network: only 1/ranks-per-node of the data crosses nodes.
#include <algorithm>
#include <string>
#include <vector>

#include "collectives/algorithms/hops.h"
#include "core/error.h"

namespace ciuic {

using hops::ChunkOf;
using hops::HasHop;
using hops::Range;

void AllReduceEngine::Impl::MakeHierarchy() {
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

void AllReduceEngine::Impl::HierLevel(size_t level, float* data, size_t n, size_t align, bool lossy) {
  if (level == levels.size()) {
    Communicator& top = level == 0 ? comm : *levels[level - 1].second;
    if (top.Size() == 1) return;
    if (codec.spec().kind == CodecKind::kTopK) {
      SparseOn(top, data, n, hier_state, static_cast<size_t>(data - hier_base), hier_n);
    } else if (lossy) {
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

void AllReduceEngine::Impl::Hierarchical(float* data, size_t n, CodecState* st) {
  MakeHierarchy();
  const bool lossy = codec.spec().kind != CodecKind::kNone;
  // Element codecs quantise each rank's contribution once (error feedback per rank), then hop
  // compressed between nodes; topk sums exactly within nodes and selects from each chunk of the node's
  // sum between them (error feedback per chunk owner).
  if (lossy && codec.spec().kind != CodecKind::kTopK) QuantiseContribution(data, n, st);
  hier_base = data;
  hier_n = n;
  hier_state = st;
  const size_t align = lossy && HasHop(codec.spec().kind) && codec.spec().kind != CodecKind::kFp16 &&
                               codec.spec().kind != CodecKind::kBf16
                           ? codec.spec().block
                           : 1;
  HierLevel(0, data, n, align, lossy);
}

}  // namespace ciuic
