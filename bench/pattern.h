#pragma once
// Inputs built so every collective's result is exactly representable in any reduction order
// (the nccl-tests idea), so results can be checked element by element at 0 ulp:
//  - sum/avg: small integers; element i gets non-zero values from at most C = min(n, B) ranks (a
//    window rotating with i) with |v| <= B / C, so every partial sum is an integer of magnitude <= B,
//    B = 2^significand bits (fp8 e4m3: 16) or the integer type's range (capped at 2^40).
//  - prod: ±1 from every rank except rank i mod n, which gives ±2 (unsigned types: 1 and 2).
//  - min/max and data movement: integers in [-B, B] ([0, B] unsigned).
// avg uses the sum inputs made non-negative, then sum / n, compared within 2 ulp (integers
// truncate, as NCCL).
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/reduce_op.h"

namespace ciuic {

enum class PatternKind { kSum, kProd, kAny };

class InputPattern {
 public:
  InputPattern(uint64_t seed, DType type, PatternKind kind, ReduceOp op, int nranks);

  // Rank `rank`'s input element `index` (exact in `type`).
  double Value(int rank, uint64_t index) const;
  // The reduction over all ranks of element `index` (exact; avg is the real quotient).
  double Reduced(uint64_t index) const;

  DType type() const { return type_; }
  ReduceOp op() const { return op_; }
  int nranks() const { return nranks_; }

 private:
  uint64_t seed_;
  DType type_;
  PatternKind kind_;
  ReduceOp op_;
  int nranks_;
  bool is_signed_;
  int64_t bound_;      // B
  int contributors_;   // C (sum)
  int64_t magnitude_;  // per-rank |v| bound
};

// Writes Value(rank, first + i) for i < count into host memory of `type`.
void FillPattern(const InputPattern& p, int rank, uint64_t first, void* host, size_t count);

// Expected value of element k of a receive buffer; false when the element is not defined.
using ExpectFn = bool (*)(const void* ctx, uint64_t k, double* expected);

// Counts elements of host[0..count) that differ from expected (0 ulp; avg within 2 ulp; NaN is
// always wrong). Reports the first wrong element through *first_wrong (or UINT64_MAX).
int64_t CountWrong(DType type, ReduceOp op, const void* host, size_t count, ExpectFn fn, const void* ctx,
                   uint64_t* first_wrong = nullptr);

}  // namespace ciuic
