// Tensor-map encoding through the driver entry point (tensor_map.h).
#include "cuda/tensor_core/tensor_map.h"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled_v12000
#include <cuda_runtime_api.h>

#include <mutex>

#include "core/check.h"

namespace rudnn::cuda::tc {
namespace {

using detail::check;

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  static cudaError_t status = cudaSuccess;
  static cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSuccess;
  static std::once_flag once;
  std::call_once(once, [] {
    void* fn = nullptr;
    status = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                              cudaEnableDefault, &found);
    if (status == cudaSuccess && found == cudaDriverEntryPointSuccess)
      encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    else
      (void)cudaGetLastError();
  });
  check(encode != nullptr, ErrorCode::Cuda,
        "cuTensorMapEncodeTiled: not provided by the CUDA driver (entry-point query: ",
        cudaGetErrorName(status), ", result ", static_cast<int>(found), ")");
  return encode;
}

}  // namespace

uint32_t tensor_map_element_bytes(CUtensorMapDataType type) {
  switch (type) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8:
      return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
      return 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
      return 4;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
      return 8;
    default:
      detail::fail(ErrorCode::InvalidArgument,
                   detail::cat("tensor map: element type ", static_cast<int>(type),
                               " is not one ruDNN encodes"));
  }
}

CUtensorMapDataType tensor_map_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case DType::f16:
      return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case DType::bf16:
      return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    default:
      detail::fail(ErrorCode::InvalidArgument, detail::cat("tensor map: dtype ", dtype_name(dtype),
                                                           "; expected f32, f16, bf16"));
  }
}

int swizzle_span(CUtensorMapSwizzle swizzle) {
  switch (swizzle) {
    case CU_TENSOR_MAP_SWIZZLE_32B:
      return 32;
    case CU_TENSOR_MAP_SWIZZLE_64B:
      return 64;
    case CU_TENSOR_MAP_SWIZZLE_128B:
      return 128;
    default:
      return 0;
  }
}

CUtensorMapSwizzle swizzle_mode(int span_bytes) {
  switch (span_bytes) {
    case 0:
      return CU_TENSOR_MAP_SWIZZLE_NONE;
    case 32:
      return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64:
      return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128:
      return CU_TENSOR_MAP_SWIZZLE_128B;
    default:
      detail::fail(ErrorCode::InvalidArgument, detail::cat("tensor map: swizzle span ", span_bytes,
                                                           "; expected 0, 32, 64, 128"));
  }
}

CUtensorMap encode_tensor_map(const TensorMapSpec& s) {
  const char* op = "tensor map";
  check(s.rank >= 1 && s.rank <= 5, ErrorCode::InvalidArgument, op, ": rank ", s.rank,
        "; expected 1 .. 5");
  const uint64_t elem = tensor_map_element_bytes(s.type);
  check(s.base != nullptr && reinterpret_cast<uintptr_t>(s.base) % 16 == 0,
        ErrorCode::InvalidArgument, op, ": global address is null or not 16-byte aligned");
  for (int i = 0; i < s.rank; ++i) {
    check(s.dims[i] >= 1 && s.dims[i] <= (uint64_t{1} << 32), ErrorCode::InvalidArgument, op,
          ": dims[", i, "] = ", s.dims[i], "; expected 1 .. 2^32");
    check(s.box[i] >= 1 && s.box[i] <= 256, ErrorCode::InvalidArgument, op, ": box[", i,
          "] = ", s.box[i], "; expected 1 .. 256");
    check(s.element_strides[i] >= 1 && s.element_strides[i] <= 8 &&
              (i > 0 || s.element_strides[0] == 1),
          ErrorCode::InvalidArgument, op, ": element_strides[", i, "] = ", s.element_strides[i],
          "; expected 1 .. 8 (1 for dimension 0)");
    if (i > 0) {
      check(s.strides[i - 1] % 16 == 0 && s.strides[i - 1] < (uint64_t{1} << 40),
            ErrorCode::InvalidArgument, op, ": stride of dimension ", i, " = ", s.strides[i - 1],
            " bytes; expected a multiple of 16 below 2^40");
    }
  }
  const uint64_t inner_bytes = s.box[0] * elem;
  check(inner_bytes % 16 == 0, ErrorCode::InvalidArgument, op, ": box[0] = ", s.box[0],
        " elements is ", inner_bytes, " bytes; expected a multiple of 16");
  const int span = swizzle_span(s.swizzle);
  check(span == 0 || inner_bytes <= static_cast<uint64_t>(span), ErrorCode::InvalidArgument, op,
        ": box[0] is ", inner_bytes, " bytes, wider than the ", span, "-byte swizzle");

  CUtensorMap map{};
  const CUresult r = encoder()(&map, s.type, static_cast<cuuint32_t>(s.rank),
                               const_cast<void*>(s.base), s.dims, s.strides,
                               s.box, s.element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, s.swizzle,
                               s.l2_promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  check(r == CUDA_SUCCESS, ErrorCode::Cuda, op, ": cuTensorMapEncodeTiled failed with CUresult ",
        static_cast<int>(r), " (rank ", s.rank, ", dims[0] ", s.dims[0], ", box[0] ", s.box[0],
        ")");
  return map;
}

}  // namespace rudnn::cuda::tc
