#pragma once
// Element-wise reduction on host memory: the CPU reference the local and mpi backends reduce with
// (and the oracle for CUDA twins). Narrow floats are widened to fp32, combined and rounded back once
// per step, as a device reduction does. kAvg accumulates as a sum; DivideBy finishes it.
#include <cstddef>

#include "core/dtype.h"
#include "core/reduce_op.h"

namespace ciuic {

// acc[i] = acc[i] (op) in[i] for i < n.
void ReduceInto(void* acc, const void* in, size_t n, DType type, ReduceOp op);
// buf[i] /= divisor (integers truncate toward zero, as C and NCCL do).
void DivideBy(void* buf, size_t n, DType type, int divisor);

}  // namespace ciuic
