// CUDA entry points of the paged family: the forward by dtype, cache writes, and the pinned
// upload of a plan's metadata.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <memory>

#include "cuda/launch.cuh"
#include "paged_attention/cuda/forward.cuh"
#include "paged_attention/cuda/launch.h"
#include "paged_attention/cuda/mla_tc.h"
#include "paged_attention/cuda/tuning.h"

namespace rudnn::paged::cuda {

KernelTuning& kernel_tuning() {
  static KernelTuning tuning;
  return tuning;
}

void forward(const PagedForward& p, const Stream& stream) {
  // MLA with R = 512, P = 64 in 16 bits: the tensor-core kernel where the device runs it.
  if (p.dim_pos > 0 && mla_tc_forward(p, stream)) return;
  rudnn::cuda::with_float_type(
      p.dtype, [&](auto tag) { forward_typed<typename decltype(tag)::type>(p, stream); });
}

namespace {

// One block per token: its heads · dim elements copied as raw words of the element size
// (a write moves bits, no conversion).
template <class Word>
__global__ void __launch_bounds__(256) paged_write_kernel(const PagedWrite w) {
  const int64_t t = blockIdx.x;
  const int64_t slot = load_index(w.slots, w.slots_dtype == DType::i64, t);
  if (slot < 0 || slot >= w.pages * w.page_size) return;
  const int64_t page = slot / w.page_size, row = slot % w.page_size;
  const Word* const src = static_cast<const Word*>(w.src) + t * w.heads * w.dim;
  Word* const dst = static_cast<Word*>(w.cache) + page * w.page_stride + row * w.row_stride;
  for (int64_t e = threadIdx.x; e < w.heads * w.dim; e += blockDim.x) {
    const int64_t h = e / w.dim, d = e % w.dim;
    dst[h * w.head_stride + d] = src[e];
  }
}

}  // namespace

void write(const PagedWrite& w, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  if (w.tokens == 0) return;
  if (dtype_size(w.dtype) == 2) {
    paged_write_kernel<uint16_t><<<static_cast<unsigned>(w.tokens), 256, 0, ctx.stream>>>(w);
  } else {
    paged_write_kernel<uint32_t><<<static_cast<unsigned>(w.tokens), 256, 0, ctx.stream>>>(w);
  }
  detail::check_launch("paged_write_kernel");
}

namespace {

// The pinned copy of an upload and the event that marks its copy done.
struct Staging {
  int device = 0;
  void* host = nullptr;
  cudaEvent_t copied = nullptr;
  ~Staging() {
    const detail::cuda::DeviceGuard guard(device);
    // Waits for this upload's copy only (never the device or the stream).
    if (copied) {
      cudaEventSynchronize(copied);
      cudaEventDestroy(copied);
    }
    if (host) cudaFreeHost(host);
  }
};

}  // namespace

std::shared_ptr<void> upload_pinned(const int32_t* values, size_t count, void* dst,
                                    const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  auto staging = std::make_shared<Staging>();
  staging->device = ctx.device.index;
  const size_t bytes = count * sizeof(int32_t);
  if (bytes == 0) return staging;
  detail::check_cuda(cudaHostAlloc(&staging->host, bytes, cudaHostAllocDefault),
                     "paged_attention::DevicePlan::upload: cudaHostAlloc");
  std::memcpy(staging->host, values, bytes);
  detail::check_cuda(cudaEventCreateWithFlags(&staging->copied, cudaEventDisableTiming),
                     "paged_attention::DevicePlan::upload: cudaEventCreate");
  detail::check_cuda(cudaMemcpyAsync(dst, staging->host, bytes, cudaMemcpyHostToDevice, ctx.stream),
                     "paged_attention::DevicePlan::upload: cudaMemcpyAsync");
  detail::check_cuda(cudaEventRecord(staging->copied, ctx.stream),
                     "paged_attention::DevicePlan::upload: cudaEventRecord");
  return staging;
}

}  // namespace rudnn::paged::cuda
