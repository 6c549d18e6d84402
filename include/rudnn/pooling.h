// Pooling: max, average, adaptive max / average and LP pooling over 1-D, 2-D and 3-D inputs,
// forward and backward, with PyTorch's semantics (max_pool{1,2,3}d, avg_pool{1,2,3}d,
// adaptive_{max,avg}_pool{1,2,3}d, lp_pool{1,2,3}d and their backwards).
//
// Inputs: [N, C, L], [N, C, H, W] or [N, C, D, H, W] (logical NCHW order). Layout is detected
// from the input's strides, as torch's memory_format: a contiguous input runs in NCHW order; a
// channels-last dense input (strides of [N, L, C], [N, H, W, C] or [N, D, H, W, C] seen through
// a permutation, torch's channels_last / channels_last_3d) runs channels-last kernels that
// read C contiguously, with no transposing copy; any other strides are read through one dense
// NCHW copy. Outputs follow the problem's layout: the functional forms return channels-last
// tensors for channels-last problems (as torch), and _into outputs (and the backward's
// dinput_out) must be contiguous for NCHW problems and channels-last dense for channels-last
// ones. A backward's layout is its `input`'s; its dout / indices / out are read in place when
// they have that layout, else through one copy into it. Indices are flat within the (n, c)
// plane in either layout (as torch). _into outputs are refused if they overlap an input.
//
// Global pooling is adaptive pooling to output_size {1, ...}: adaptive_avg_pool(x, {1, 1}) is
// torch's global average pool (and F.adaptive_max_pool2d(x, 1) its max).
//
// Dtypes: F32/F16/BF16 on the GPU (FP32 accumulation, one rounding per output); F64 and the
// same three on the CPU, where the float64 reference computes. Memory: outputs only (plus the
// layout copy above for odd strides); no workspace. All work is queued on `stream`; nothing
// synchronises the host. Backwards are gathers (each input gradient written once, in a fixed
// order, no atomics): deterministic.
//
// Divergences from PyTorch: inputs must carry the batch axis (torch also takes unbatched
// [C, L] / [C, H, W] / [C, D, H, W]: add a batch of 1); every option list and output_size has
// one entry per spatial axis (no single-int broadcast, no None entries in output_size); LP
// pooling takes norm_type finite and > 0 (torch also accepts 0, negatives and inf).
//
// Errors (rudnn::Error naming op, argument and rule): input not 3-, 4- or 5-d or with an
// empty axis other than the batch (N = 0 gives empty outputs); kernel/stride/padding/dilation
// lists whose length is not the spatial rank (stride, padding and dilation may be empty:
// defaults kernel, 0, 1); kernel, stride or dilation <= 0; padding < 0 or > kernel / 2; an
// output size <= 0 (kernel larger than the padded input); dilation != 1 or divisor_override
// < 0 for average pooling; for LP pooling padding != 0, dilation != 1, divisor_override != 0
// or norm_type not finite > 0; output_size of the wrong length or with an entry < 1;
// mismatched dtypes, devices or shapes of dout / indices / out; indices not I64; _into
// outputs of the wrong shape, dtype or layout, or overlapping an input.
#pragma once

#include <cstdint>
#include <vector>

#include "rudnn/stream.h"
#include "rudnn/tensor.h"

namespace rudnn {

struct PoolOptions {
  std::vector<int64_t> kernel;    // one per spatial axis
  std::vector<int64_t> stride;    // empty: = kernel
  std::vector<int64_t> padding;   // empty: 0; each <= kernel / 2, added on both sides
  std::vector<int64_t> dilation;  // empty: 1; max only (average pooling takes 1)
  // torch's rule: sizes round up, but the last window must start inside the input or the
  // left padding.
  bool ceil_mode = false;
  bool count_include_pad = true;  // average: padded positions count in the divisor
  int64_t divisor_override = 0;   // average: 0 = none, else the divisor of every window
};

struct MaxPoolResult {
  Tensor out;      // [N, C, out...], the input's dtype
  Tensor indices;  // I64, same shape: flat index of the max within its (n, c) plane, as torch
};

// Max pooling. out[n, c, o] = max over the window (padding never wins); NaN wins over every
// number (as torch: a later NaN in the window replaces an earlier one). Ties keep the first.
MaxPoolResult max_pool(const Tensor& input, const PoolOptions& options, const Stream& stream = {});
void max_pool_into(const Tensor& out, const Tensor& indices_out, const Tensor& input,
                   const PoolOptions& options, const Stream& stream = {});

// Gradient of max_pool with respect to its input, from the forward's indices: every input
// element gathers the dout entries whose index points at it (deterministic, no atomics).
// dout and indices: [N, C, out...]; `input` gives shape, dtype and device only.
// Divergence from torch: `indices` must come from max_pool with the same options; an index
// outside its output's window is ignored here, where torch would scatter to it anyway.
Tensor max_pool_backward(const Tensor& dout, const Tensor& indices, const Tensor& input,
                         const PoolOptions& options, const Stream& stream = {});
void max_pool_backward_into(const Tensor& dinput_out, const Tensor& dout, const Tensor& indices,
                            const Tensor& input, const PoolOptions& options,
                            const Stream& stream = {});

// Average pooling: sum of the in-bounds window elements over the divisor (divisor_override,
// else the window clipped to the padded input when count_include_pad, else the window clipped
// to the input), as torch.
Tensor avg_pool(const Tensor& input, const PoolOptions& options, const Stream& stream = {});
void avg_pool_into(const Tensor& out, const Tensor& input, const PoolOptions& options,
                   const Stream& stream = {});

// Gradient of avg_pool with respect to its input: a gather over the windows covering each
// input element (deterministic, no atomics). dout: [N, C, out...].
Tensor avg_pool_backward(const Tensor& dout, const Tensor& input, const PoolOptions& options,
                         const Stream& stream = {});
void avg_pool_backward_into(const Tensor& dinput_out, const Tensor& dout, const Tensor& input,
                            const PoolOptions& options, const Stream& stream = {});

// Adaptive max pooling to `output_size` (one entry per spatial axis, each >= 1): output o of
// an axis of size `in` pools [floor(o * in / out), ceil((o + 1) * in / out)), as torch; NaN,
// ties and indices as max_pool. Windows of neighbouring outputs may overlap (out does not
// divide in) or repeat (out > in).
MaxPoolResult adaptive_max_pool(const Tensor& input, const std::vector<int64_t>& output_size,
                                const Stream& stream = {});
void adaptive_max_pool_into(const Tensor& out, const Tensor& indices_out, const Tensor& input,
                            const std::vector<int64_t>& output_size, const Stream& stream = {});

// Gradient of adaptive_max_pool, a gather as max_pool_backward (same divergence on indices).
Tensor adaptive_max_pool_backward(const Tensor& dout, const Tensor& indices, const Tensor& input,
                                  const std::vector<int64_t>& output_size,
                                  const Stream& stream = {});
void adaptive_max_pool_backward_into(const Tensor& dinput_out, const Tensor& dout,
                                     const Tensor& indices, const Tensor& input,
                                     const std::vector<int64_t>& output_size,
                                     const Stream& stream = {});

// Adaptive average pooling: the mean over adaptive_max_pool's windows (divisor = the window's
// element count).
Tensor adaptive_avg_pool(const Tensor& input, const std::vector<int64_t>& output_size,
                         const Stream& stream = {});
void adaptive_avg_pool_into(const Tensor& out, const Tensor& input,
                            const std::vector<int64_t>& output_size, const Stream& stream = {});

Tensor adaptive_avg_pool_backward(const Tensor& dout, const Tensor& input,
                                  const std::vector<int64_t>& output_size,
                                  const Stream& stream = {});
void adaptive_avg_pool_backward_into(const Tensor& dinput_out, const Tensor& dout,
                                     const Tensor& input, const std::vector<int64_t>& output_size,
                                     const Stream& stream = {});

// LP pooling, as torch's lp_pool: out = (avg_pool(x^p) * K)^(1/p) with K the kernel's element
// count, i.e. (sum over the window of x^p)^(1/p), except that a window clipped by ceil_mode is
// scaled by K / (its in-bounds count) as in torch. options: kernel, stride, ceil_mode;
// padding must be 0, dilation 1, divisor_override 0 (count_include_pad has no effect). Signs
// as torch: x^p of a negative x with a non-integer p is NaN, and so is a negative window sum's
// 1/p-th power unless 1/p is an integer (p = 1: the plain sum).
Tensor lp_pool(const Tensor& input, double norm_type, const PoolOptions& options,
               const Stream& stream = {});
void lp_pool_into(const Tensor& out, const Tensor& input, double norm_type,
                  const PoolOptions& options, const Stream& stream = {});

// Gradient of lp_pool with respect to its input, from the forward's input and output `out`:
// dx = x^(p-1) * sum over the windows covering x of dout * out^(1-p) * K / count. A window
// whose out is 0 passes no gradient (torch's sign/relu step does the same). Gather, no atomics.
Tensor lp_pool_backward(const Tensor& dout, const Tensor& input, const Tensor& out,
                        double norm_type, const PoolOptions& options, const Stream& stream = {});
void lp_pool_backward_into(const Tensor& dinput_out, const Tensor& dout, const Tensor& input,
                           const Tensor& out, double norm_type, const PoolOptions& options,
                           const Stream& stream = {});

}  // namespace rudnn
