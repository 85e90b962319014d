#pragma once
// Reduction operators. kAvg is a sum followed by one division by the number of ranks (as NCCL).
#include <string_view>
#include <vector>

namespace ciuic {

enum class ReduceOp { kSum, kAvg, kMin, kMax, kProd };

ReduceOp ParseReduceOp(std::string_view name);  // throws UsageError
const char* ReduceOpName(ReduceOp op);
const std::vector<ReduceOp>& AllReduceOps();

}  // namespace ciuic
