// The launcher of the tensor-core MLA kernel (mla_tc.cuh) for F16 and BF16, and the merge of
// its split history (the general kernel's paged_merge_kernel: same records).
#include <cuda_runtime.h>

#include "cuda/device_info.h"
#include "cuda/launch.cuh"
#include "paged_attention/cuda/forward.cuh"
#include "paged_attention/cuda/mla_tc.cuh"
#include "paged_attention/cuda/mla_tc.h"

namespace rudnn::paged::cuda {

namespace {

rudnn::cuda::PerDevice<signed char> mla_usable_known;
rudnn::cuda::PerDevice<signed char> mla_wgmma_known;

template <class T, bool kWgmma>
void launch_kernel(const mla::Args& a, int64_t blocks, const rudnn::cuda::LaunchContext& ctx) {
  // Above the 48 KiB default; set per launch, as the setting belongs to the current device.
  detail::check_cuda(cudaFuncSetAttribute(mla::paged_mla_tc_kernel<T, kWgmma>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(mla::kSharedBytes)),
                     "paged_mla_tc_kernel: cudaFuncSetAttribute");
  mla::paged_mla_tc_kernel<T, kWgmma>
      <<<static_cast<unsigned>(blocks), mla::kThreads, mla::kSharedBytes, ctx.stream>>>(a);
  detail::check_launch("paged_mla_tc_kernel");
}

template <class T>
void launch_mla(const PagedForward& p, bool wgmma, const rudnn::cuda::LaunchContext& ctx) {
  mla::Args a;
  a.p = p;
  a.row_tiles = mla_tc_row_tiles(p);
  const int64_t blocks = p.sched.items * a.row_tiles * p.splits;
  if (blocks > 0) {
    if (wgmma) {
      launch_kernel<T, true>(a, blocks, ctx);
    } else {
      launch_kernel<T, false>(a, blocks, ctx);
    }
  }
  if (p.splits > 1) {
    ForwardArgs m;
    m.p = p;
    m.vec_out = true;  // mla_tc_takes: out rows of 512 on 4-byte boundaries
    const int64_t rows = p.queries * p.heads_q;
    const int64_t merge_blocks = (rows + kWarps - 1) / kWarps;
    if (merge_blocks > 0) {
      paged_merge_kernel<T><<<static_cast<unsigned>(merge_blocks), kThreads, 0, ctx.stream>>>(m);
      detail::check_launch("paged_merge_kernel");
    }
  }
}

}  // namespace

MlaTuning& mla_tuning() {
  static MlaTuning tuning;
  return tuning;
}

bool mla_tc_wgmma_usable(const Stream& stream) {
#if RUDNN_PAGED_SM90A
  const rudnn::cuda::LaunchContext ctx(stream);
  return rudnn::cuda::built_for_hopper(mla::paged_mla_tc_kernel<__nv_bfloat16, true>, ctx.device,
                                       mla_wgmma_known);
#else
  (void)stream;
  return false;
#endif
}

bool mla_tc_usable(const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  return mla_usable_known.get(ctx.device, [&]() -> signed char {
    cudaFuncAttributes attributes{};
    detail::check_cuda(
        cudaFuncGetAttributes(&attributes, mla::paged_mla_tc_kernel<__nv_bfloat16, false>),
        "paged_mla_tc_kernel: cudaFuncGetAttributes");
    const bool code = attributes.binaryVersion >= 80;
    const bool shared =
        rudnn::cuda::device_info(ctx.device).shared_bytes_per_block_optin >=
        mla::kSharedBytes + attributes.sharedSizeBytes;
    return code && shared ? 1 : -1;
  }) > 0;
}

bool mla_tc_forward(const PagedForward& p, const Stream& stream) {
  if (!mla_tc_takes(p) || !mla_tc_usable(stream)) return false;
  const rudnn::cuda::LaunchContext ctx(stream);
  const bool wgmma = mla_tuning().wgmma && mla_tc_wgmma_usable(stream);
  if (p.dtype == DType::bf16) {
    launch_mla<__nv_bfloat16>(p, wgmma, ctx);
  } else {
    launch_mla<__half>(p, wgmma, ctx);
  }
  return true;
}

}  // namespace rudnn::paged::cuda
