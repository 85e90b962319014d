#pragma once
// CIUIC_CUDA_CHECK(call): turns a cudaError_t into a RuntimeError naming the call, the rank and
// file:line. Include only from .cc/.cu files built with CIUIC_HAVE_CUDA.
#include <cuda_runtime_api.h>

#include "core/error.h"

#define CIUIC_CUDA_CHECK(call)                                                                            \
  do {                                                                                                    \
    cudaError_t ciuic_cuda_status_ = (call);                                                              \
    if (ciuic_cuda_status_ != cudaSuccess) {                                                              \
      throw ::ciuic::RuntimeError(                                                                        \
          ::ciuic::FormatCallFailure(#call, cudaGetErrorString(ciuic_cuda_status_), __FILE__, __LINE__)); \
    }                                                                                                     \
  } while (0)
