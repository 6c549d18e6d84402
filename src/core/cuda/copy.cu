// Device kernels of the core: strided copies (contiguous(), copy_from) and fills (full()).
// Element-size generic: a copy moves bytes, so one kernel per element size serves every
// dtype. Index arithmetic is 64-bit throughout.
#include <cstdint>

#include "core/cuda_api.h"
#include "core/cuda_check.h"

namespace rudnn::detail::cuda {

namespace {

constexpr int kMaxDims = 12;

struct StridedLayout {
  int dims;
  int64_t shape[kMaxDims];
  int64_t dst_strides[kMaxDims];
  int64_t src_strides[kMaxDims];
};

template <class Element>
__global__ void strided_copy_kernel(Element* __restrict__ dst, const Element* __restrict__ src,
                                    int64_t count, StridedLayout layout) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = i, dst_offset = 0, src_offset = 0;
    for (int d = layout.dims - 1; d >= 0; --d) {
      const int64_t index = rest % layout.shape[d];
      rest /= layout.shape[d];
      dst_offset += index * layout.dst_strides[d];
      src_offset += index * layout.src_strides[d];
    }
    dst[dst_offset] = src[src_offset];
  }
}

template <class Element>
__global__ void fill_kernel(Element* __restrict__ dst, int64_t count, Element value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = value;
  }
}

unsigned grid_for(int64_t count, int threads) {
  const int64_t blocks = (count + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65536 ? blocks : 65536);  // grid-stride beyond that
}

template <class Element>
void launch_copy(void* dst, const void* src, int64_t count, const StridedLayout& layout,
                 cudaStream_t stream) {
  strided_copy_kernel<Element><<<grid_for(count, 256), 256, 0, stream>>>(
      static_cast<Element*>(dst), static_cast<const Element*>(src), count, layout);
}

template <class Element>
void launch_fill(void* dst, int64_t count, uint64_t pattern, cudaStream_t stream) {
  fill_kernel<Element><<<grid_for(count, 256), 256, 0, stream>>>(static_cast<Element*>(dst), count,
                                                                 static_cast<Element>(pattern));
}

}  // namespace

void strided_copy(void* dst, const int64_t* dst_strides, const void* src,
                  const int64_t* src_strides, const int64_t* shape, int dims, size_t element_size,
                  Device device, cuda_stream_t stream) {
  check(dims <= kMaxDims, ErrorCode::Unsupported, "strided copy: ", dims,
        " dimensions after collapsing (at most ", kMaxDims, ")");
  StridedLayout layout{};
  layout.dims = dims;
  int64_t count = 1;
  for (int d = 0; d < dims; ++d) {
    layout.shape[d] = shape[d];
    layout.dst_strides[d] = dst_strides[d];
    layout.src_strides[d] = src_strides[d];
    count *= shape[d];
  }
  if (count == 0) return;
  DeviceGuard guard(device.index);
  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  switch (element_size) {
    case 1:
      launch_copy<uint8_t>(dst, src, count, layout, s);
      break;
    case 2:
      launch_copy<uint16_t>(dst, src, count, layout, s);
      break;
    case 4:
      launch_copy<uint32_t>(dst, src, count, layout, s);
      break;
    case 8:
      launch_copy<uint64_t>(dst, src, count, layout, s);
      break;
    default:
      fail(ErrorCode::Unsupported, cat("strided copy: element size ", element_size));
  }
  check_launch("strided_copy_kernel");
}

void fill_pattern(void* dst, int64_t count, size_t element_size, uint64_t pattern, Device device,
                  cuda_stream_t stream) {
  if (count == 0) return;
  DeviceGuard guard(device.index);
  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  switch (element_size) {
    case 1:
      launch_fill<uint8_t>(dst, count, pattern, s);
      break;
    case 2:
      launch_fill<uint16_t>(dst, count, pattern, s);
      break;
    case 4:
      launch_fill<uint32_t>(dst, count, pattern, s);
      break;
    case 8:
      launch_fill<uint64_t>(dst, count, pattern, s);
      break;
    default:
      fail(ErrorCode::Unsupported, cat("fill: element size ", element_size));
  }
  check_launch("fill_kernel");
}

}  // namespace rudnn::detail::cuda
