// Tensor maps for TMA (tensor_core/tma.cuh), encoded on the host.
//
// The encoder is the driver's cuTensorMapEncodeTiled, reached at run time through the CUDA
// runtime's entry-point query (cudaGetDriverEntryPointByVersion, asking for the CUDA 12.0 ABI
// of the function), so that librudnn does not link libcuda: the driver the process already
// loaded provides it. The lookup runs once per process (thread-safe).
//
// A map is 128 bytes, passed to a kernel by value as a `const __grid_constant__ CUtensorMap`
// parameter; it holds the global address, so it is encoded per call (a few microseconds of
// host time, no device work: capturable in a CUDA graph).
//
// Host code, CUDA builds only (tensor_map.cpp).
#pragma once

#include <cuda.h>  // CUtensorMap and its enums: types only

#include <cstdint>

#include "rudnn/dtype.h"

namespace rudnn::cuda::tc {

// What cuTensorMapEncodeTiled takes, with the out-of-bounds fill at zeros.
struct TensorMapSpec {
  CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  int rank = 2;                // 1 .. 5
  const void* base = nullptr;  // global address, 16-byte aligned
  cuuint64_t dims[5] = {};     // elements per dimension, innermost first, each in [1, 2^32]
  cuuint64_t strides[4] = {};  // byte strides of dims 1 .. rank-1: multiples of 16, < 2^40
  cuuint32_t box[5] = {};      // box elements per dimension, each in [1, 256]; box[0] *
                               // element bytes a multiple of 16 (and <= the swizzle span)
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  // Traversal step per dimension, 1 .. 8 (element_strides[0] must stay 1 here): a box then
  // holds box[i] / element_strides[i] elements along i (round up), every step-th one from the
  // box's start. A strided convolution's input read straight by its output's stride.
  cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
};

// Checks the spec (InvalidArgument naming the broken rule: these are the library's own
// calls, so a failure is a bug, reported rather than left to the driver's bare error code)
// and encodes it. Errors: Cuda when the driver lacks the encoder or refuses the map.
CUtensorMap encode_tensor_map(const TensorMapSpec& spec);

// The map's element type for a ruDNN dtype (f32, f16, bf16; InvalidArgument otherwise).
CUtensorMapDataType tensor_map_type(DType dtype);

// Bytes per element of a map's type (those tensor_map_type returns).
uint32_t tensor_map_element_bytes(CUtensorMapDataType type);

// Swizzle span in bytes (0, 32, 64, 128) of a swizzle mode, and back.
int swizzle_span(CUtensorMapSwizzle swizzle);
CUtensorMapSwizzle swizzle_mode(int span_bytes);

}  // namespace rudnn::cuda::tc
