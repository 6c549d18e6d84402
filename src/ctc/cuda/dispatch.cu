// Entry points of the CTC CUDA backend: the device and dtype picked here, the kernels of
// ctc.cuh instantiated once per dtype (ctc_{f32,f16,bf16}.cu).
#include <algorithm>

#include "ctc/cuda/ctc.cuh"

namespace rudnn::ctc::cuda {

extern template void ctc_loss_typed<float>(const CtcProblem&, const rudnn::cuda::LaunchContext&);
extern template void ctc_loss_typed<__half>(const CtcProblem&, const rudnn::cuda::LaunchContext&);
extern template void ctc_loss_typed<__nv_bfloat16>(const CtcProblem&,
                                                   const rudnn::cuda::LaunchContext&);
extern template void ctc_loss_backward_typed<float>(const CtcProblem&,
                                                    const rudnn::cuda::LaunchContext&);
extern template void ctc_loss_backward_typed<__half>(const CtcProblem&,
                                                     const rudnn::cuda::LaunchContext&);
extern template void ctc_loss_backward_typed<__nv_bfloat16>(const CtcProblem&,
                                                            const rudnn::cuda::LaunchContext&);

namespace {

// Shared memory of a recursion block: `chunk` steps of gathered log-probabilities (first, so
// that they are 16-byte aligned), two rows of states and the labels with the blank.
size_t recursion_bytes(int64_t max_target, int64_t chunk) {
  return static_cast<size_t>(
      4 * (chunk * gathered_width(max_target) + 2 * (2 * max_target + 1) + max_target + 1));
}

int recursion_threads(int64_t max_target) {
  const int64_t states = 2 * max_target + 1;
  return static_cast<int>(std::min<int64_t>(kMaxRecursionThreads, (states + 31) / 32 * 32));
}

// Up to this much per block, so that two blocks of long targets still share an SM.
constexpr size_t kPreferredShared = 96 * 1024;

// The dynamic shared memory a recursion block may use: the opt-in maximum less the kernel's
// static block_max array (the two together must fit).
size_t dynamic_optin(Device device) {
  return rudnn::cuda::device_info(device).shared_bytes_per_block_optin -
         sizeof(float) * (kMaxRecursionThreads / 32);
}

}  // namespace

int64_t longest_target(Device device) {
  const size_t optin = dynamic_optin(device);
  // recursion_bytes(m, 1) <= 4 * (7m + 8) <= optin; and one step of gathered values must fit
  // the registers of the next block of steps (gathered_width(m) <= 16 * threads).
  const int64_t by_shared = (static_cast<int64_t>(optin) / 4 - 8) / 7;
  const int64_t by_registers = int64_t{4} * kPrefetch * kMaxRecursionThreads - 4;
  return std::max<int64_t>(0, std::min(by_shared, by_registers));
}

RecursionShape recursion_shape(const CtcProblem& p, Device device) {
  RecursionShape r;
  r.threads = recursion_threads(p.max_target);
  const size_t optin = dynamic_optin(device);
  const size_t fixed = recursion_bytes(p.max_target, 0);
  const size_t per_step = 4 * static_cast<size_t>(gathered_width(p.max_target));
  size_t budget = std::min(optin, kPreferredShared);
  if (fixed + per_step > budget) budget = optin;
  const size_t fit = budget > fixed ? (budget - fixed) / per_step : 1;
  // The next block of steps lives in kPrefetch 16-byte vectors per thread.
  const size_t held = static_cast<size_t>(kPrefetch) * 4 * static_cast<size_t>(r.threads) /
                      static_cast<size_t>(gathered_width(p.max_target));
  r.chunk = static_cast<int>(std::clamp<size_t>(std::min(fit, held), 1, kMaxChunk));
  r.shared = recursion_bytes(p.max_target, r.chunk);
  return r;
}

void ctc_loss(const CtcProblem& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  rudnn::cuda::with_float_type(
      p.dtype, [&](auto tag) { ctc_loss_typed<typename decltype(tag)::type>(p, ctx); });
}

void ctc_loss_backward(const CtcProblem& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  rudnn::cuda::with_float_type(
      p.dtype, [&](auto tag) { ctc_loss_backward_typed<typename decltype(tag)::type>(p, ctx); });
}

}  // namespace rudnn::ctc::cuda
