// Pooling: max and average pooling over 1-D, 2-D and 3-D NCHW-style inputs, forward and
// backward, with PyTorch's semantics (max_pool{1,2,3}d / avg_pool{1,2,3}d and their
// backwards).
//
// Implemented: max_pool, max_pool_backward, avg_pool, avg_pool_backward on contiguous-order
// inputs [N, C, L], [N, C, H, W], [N, C, D, H, W] (any strides are accepted: odd layouts are
// read through one dense copy). Not implemented yet (later work): adaptive, global and LP
// pooling, channels-last kernels. Each function has an _into form writing caller-owned
// contiguous outputs of the documented shape and dtype (refused if they overlap an input).
//
// Dtypes: F32/F16/BF16 on the GPU (FP32 accumulation, one rounding per output); F64 and the
// same three on the CPU, where the float64 reference computes. Memory: outputs only; no
// workspace. All work is queued on `stream`; nothing synchronises the host.
//
// Divergences from PyTorch: inputs must carry the batch axis (torch also takes unbatched
// [C, L] / [C, H, W] / [C, D, H, W]: add a batch of 1); every option list has one entry per
// spatial axis (no single-int broadcast).
//
// Errors (rudnn::Error naming op, argument and rule): input not 3-, 4- or 5-d or with an
// empty axis other than the batch (N = 0 gives empty outputs); kernel/stride/padding/dilation
// lists whose length is not the spatial rank (stride, padding and dilation may be empty:
// defaults kernel, 0, 1); kernel, stride or dilation <= 0; padding < 0 or > kernel / 2; an
// output size <= 0 (kernel larger than the padded input); dilation != 1 or divisor_override
// < 0 for average pooling; mismatched dtypes, devices or shapes of dout / indices; indices
// not I64; _into outputs of the wrong shape or dtype, not contiguous, or overlapping an input.
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

}  // namespace rudnn
