#include "core/reduce_op.h"

#include "core/error.h"

namespace ciuic {

namespace {
constexpr const char* kNames[] = {"sum", "avg", "min", "max", "prod"};
}

ReduceOp ParseReduceOp(std::string_view name) {
  for (int i = 0; i < 5; ++i) {
    if (name == kNames[i]) return static_cast<ReduceOp>(i);
  }
  throw UsageError(fmt::format("unknown reduction op '{}' (known: sum, avg, min, max, prod)", name));
}

const char* ReduceOpName(ReduceOp op) { return kNames[static_cast<int>(op)]; }

const std::vector<ReduceOp>& AllReduceOps() {
  static const std::vector<ReduceOp> all = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                                            ReduceOp::kProd};
  return all;
}

}  // namespace ciuic
