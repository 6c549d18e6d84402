// CUDA entry points of the attention family: the kernel family of the problem's plan, and
// nothing else (the plan was made, and reported, by attention/plan.h).
#include "attention/cuda/kernels.h"
#include "attention/cuda/launch.h"
#include "attention/cuda/tuning.h"
#include "cuda/launch.cuh"

namespace rudnn::attn::cuda {

KernelTuning& kernel_tuning() {
  static KernelTuning tuning;
  return tuning;
}

namespace {

// The Flash instance of the problem's dtype and head sizes (the plan took only pairs that
// flash_takes_heads accepts, and only f16 / bf16).
template <class T>
void flash_forward_dispatch(const AttentionForward& p, const Stream& stream) {
  const int64_t d = p.sizes.dim_qk, dv = p.sizes.dim_v;
  if (d == 64 && dv == 64) return flash_forward<T, 64, 64>(p, stream);
  if (d == 96 && dv == 96) return flash_forward<T, 96, 96>(p, stream);
  if (d == 128 && dv == 128) return flash_forward<T, 128, 128>(p, stream);
  if (d == 192 && dv == 192) return flash_forward<T, 192, 192>(p, stream);
  if (d == 192 && dv == 128) return flash_forward<T, 192, 128>(p, stream);
  if (d == 256 && dv == 256) return flash_forward<T, 256, 256>(p, stream);
}

// The Hopper instance (the plan chose it only for D = Dv in {64, 128, 256}).
template <class T>
void flash_hopper_dispatch(const AttentionForward& p, const Stream& stream) {
  switch (p.sizes.dim_qk) {
    case 64:
      return flash_hopper_forward<T, 64>(p, stream);
    case 128:
      return flash_hopper_forward<T, 128>(p, stream);
    case 256:
      return flash_hopper_forward<T, 256>(p, stream);
    default:
      return;
  }
}

template <class T>
void flash_backward_dispatch(const AttentionBackward& p, const Stream& stream) {
  const int64_t d = p.sizes.dim_qk, dv = p.sizes.dim_v;
  if (d == 64 && dv == 64) return flash_backward<T, 64, 64>(p, stream);
  if (d == 96 && dv == 96) return flash_backward<T, 96, 96>(p, stream);
  if (d == 128 && dv == 128) return flash_backward<T, 128, 128>(p, stream);
  if (d == 192 && dv == 192) return flash_backward<T, 192, 192>(p, stream);
  if (d == 192 && dv == 128) return flash_backward<T, 192, 128>(p, stream);
  if (d == 256 && dv == 256) return flash_backward<T, 256, 256>(p, stream);
}

}  // namespace

void attention_forward(const AttentionForward& p, const Stream& stream) {
  switch (p.plan.kernel) {
    case AttentionKernel::Composed:
      composed_forward(p, stream);
      return;
    case AttentionKernel::FlashScalar:
    case AttentionKernel::SplitKv:
      rudnn::cuda::with_float_type(
          p.dtype, [&](auto tag) { scalar_forward<typename decltype(tag)::type>(p, stream); });
      return;
    case AttentionKernel::Flash:
      if (p.plan.flash_wgmma) {
        if (p.dtype == DType::f16) {
          flash_hopper_dispatch<__half>(p, stream);
        } else if (p.dtype == DType::bf16) {
          flash_hopper_dispatch<__nv_bfloat16>(p, stream);
        }
      } else if (p.dtype == DType::f16) {
        flash_forward_dispatch<__half>(p, stream);
      } else if (p.dtype == DType::bf16) {
        flash_forward_dispatch<__nv_bfloat16>(p, stream);
      }
      return;
    case AttentionKernel::Reference:
      break;  // never planned for a CUDA device
  }
}

void attention_backward(const AttentionBackward& p, const Stream& stream) {
  switch (p.plan.kernel) {
    case AttentionKernel::FlashScalar:
      rudnn::cuda::with_float_type(
          p.dtype, [&](auto tag) { scalar_backward<typename decltype(tag)::type>(p, stream); });
      return;
    case AttentionKernel::Flash:
      if (p.dtype == DType::f16) {
        flash_backward_dispatch<__half>(p, stream);
      } else if (p.dtype == DType::bf16) {
        flash_backward_dispatch<__nv_bfloat16>(p, stream);
      }
      return;
    default:
      break;  // never planned for the backward on a CUDA device
  }
}

}  // namespace rudnn::attn::cuda
