// Grid sampling family: grid_sample (2-D and 3-D; bilinear, nearest, bicubic; zeros, border
// and reflection padding; align_corners) with its backward pass for the input and the grid,
// and affine_grid with its backward pass (dtheta). Semantics follow PyTorch's
// torch.nn.functional.grid_sample / affine_grid option for option.
//
// Common contract (every function below):
// - Dtypes. F32, F16 or BF16 (and F64 on the CPU, where the float64 reference runs). Every
//   operand has the same dtype (else DTypeMismatch); arithmetic is FP32 on the GPU and the
//   result is rounded once to the dtype.
// - Layout. Inputs of any strides are taken (odd layouts are first copied to a dense buffer
//   on the device: one extra pass). Results are contiguous; the outputs of the _into forms
//   must be contiguous, of the result's shape and dtype, on the operands' device, and
//   overlap no input and no other output (else InvalidArgument).
// - Devices and streams. All tensors share one device (else DeviceMismatch); the op runs
//   on `stream` (default: the current stream of that device). No op synchronises the host.
// - Indexing is 64-bit throughout (tensors beyond 2^31 elements are taken).
// - Inputs are never modified. Errors are rudnn::Error naming the op, the argument and the
//   rule.
//
// Coordinates. grid[..., 0] is x (the W axis), grid[..., 1] is y (H) and grid[..., 2] is z
// (D), normalised to [-1, 1]. With align_corners, -1 and 1 are the centres of the corner
// pixels; without, their outer edges. Border padding clamps to the edge pixels; reflection
// reflects about the borders (the corner centres with align_corners, the edges without)
// and then clamps. Nearest rounds half to even. Bicubic uses A = -0.75 and pads each of its
// 4 x 4 taps separately, as torch does. Like torch, a NaN or infinite grid coordinate (or one
// beyond the int range) samples as if at pixel -100: zero with zeros padding. Divergence:
// torch's bicubic path skips that guard (a NaN coordinate gives NaN or an undefined read);
// here bicubic takes the same -100 rule.
//
// Precision on the GPU: the source coordinate of each sample (unnormalising, padding, the
// floor that picks the taps) is computed in FP64, the weights and sums in FP32. In FP32 a
// pixel coordinate near 32768 is only known to 2^-8 pixels (1e-3 relative error in the output
// at W = 40000), and one that lands an ulp below an integer floors to the other pixel, where
// the grid gradient jumps; the FP64 floors are the reference's. torch computes them in FP32.
#pragma once

#include <cstdint>

#include "rudnn/stream.h"
#include "rudnn/tensor.h"

namespace rudnn {

enum class GridSampleMode { bilinear, nearest, bicubic };
enum class GridSamplePadding { zeros, border, reflection };

struct GridSampleOptions {
  GridSampleMode mode = GridSampleMode::bilinear;
  GridSamplePadding padding = GridSamplePadding::zeros;
  bool align_corners = false;
  // grid_sample_backward on the GPU: the input gradient without atomics, identical bits run to
  // run (see grid_sample_backward for the method and its cost). No effect elsewhere.
  bool deterministic = false;
};

// out[n, c, (do,) ho, wo] = input sampled at grid[n, (do,) ho, wo].
// 2-D: input [N, C, H, W], grid [N, Ho, Wo, 2] -> out [N, C, Ho, Wo].
// 3-D: input [N, C, D, H, W], grid [N, Do, Ho, Wo, 3] -> out [N, C, Do, Ho, Wo] (bilinear
//      means trilinear; bicubic is 2-D only, as in torch: InvalidArgument).
// H, W (and D) must be >= 1 (InvalidArgument); N, C and the grid's spatial sizes may be 0.
// grid's dtype must be input's (DTypeMismatch); its batch must match and its last axis be 2
// or 3 for 4-d or 5-d input (ShapeMismatch). An option outside its enum is InvalidArgument.
// GPU: one thread per output location, which reads its grid entry once and loops over the
// channels. Memory: no scratch.
Tensor grid_sample(const Tensor& input, const Tensor& grid, const GridSampleOptions& options = {},
                   const Stream& stream = {});
void grid_sample_into(const Tensor& out, const Tensor& input, const Tensor& grid,
                      const GridSampleOptions& options = {}, const Stream& stream = {});

struct GridSampleGrads {
  Tensor dinput;  // [N, C, (D,) H, W], input's dtype
  Tensor dgrid;   // grid's shape and dtype
};

// Gradients of grid_sample given dout (out's shape and dtype). The grid gradient is computed
// per output location with no atomics (deterministic); it is zero for nearest, and carries
// torch's derivative conventions at clamped and reflected borders (zero past a clamped edge).
// The input gradient is scattered with atomic adds by default (FP32 atomics into dinput for
// F32, into an FP32 accumulator for F16/BF16, rounded once at the end): fast, but the order of
// the sums, and so the last bits, can vary from run to run, as with torch's CUDA kernel.
// options.deterministic (GPU) gathers instead: every (location, tap) pair becomes an entry
// keyed by the input cell it feeds, a stable device radix sort (CUB) groups each cell's
// entries in a fixed order, and one thread per cell sums its entries for 8 channels at a time,
// writing dinput in its dtype directly. Identical bits run to run on one device. Cost: the
// sort and the gather's scattered reads of dout, and scratch of 36 bytes per entry (entries
// = N * grid locations * taps: 4 bilinear, 8 trilinear, 16 bicubic, 1 nearest) plus 16 bytes
// per input cell of one channel (N * D * H * W), plus CUB's temporary storage (for the bench
// shape [32, 64, 128, 128]: 2.1M entries, about 85 MB). On the CPU both modes are the same
// deterministic float64 sums.
// Memory: F16/BF16 with atomics hold N * C * D * H * W * 4 bytes of FP32 accumulator while
// they run (allocated on the stream); the deterministic scratch above is allocated likewise.
// The _into form takes either output undefined (Tensor{}) to skip that gradient.
GridSampleGrads grid_sample_backward(const Tensor& dout, const Tensor& input, const Tensor& grid,
                                     const GridSampleOptions& options = {},
                                     const Stream& stream = {});
void grid_sample_backward_into(const Tensor& dinput_out, const Tensor& dgrid_out,
                               const Tensor& dout, const Tensor& input, const Tensor& grid,
                               const GridSampleOptions& options = {}, const Stream& stream = {});

// grid[n, (d,) h, w] = theta[n] @ [x_w, y_h, (z_d,) 1], the base coordinates spaced evenly
// over [-1, 1] (pixel centres without align_corners; a single pixel sits at 0).
// 2-D: theta [N, 2, 3], size {N, C, H, W} -> grid [N, H, W, 2].
// 3-D: theta [N, 3, 4], size {N, C, D, H, W} -> grid [N, D, H, W, 3].
// size must have 4 or 5 entries, none negative, size[0] = N (InvalidArgument / ShapeMismatch).
// Divergence from torch: align_corners defaults to false without a warning.
Tensor affine_grid(const Tensor& theta, const Shape& size, bool align_corners = false,
                   const Stream& stream = {});
void affine_grid_into(const Tensor& out, const Tensor& theta, const Shape& size,
                      bool align_corners = false, const Stream& stream = {});

// dtheta [N, 2, 3] (or [N, 3, 4]) of affine_grid given dgrid (the grid's shape): a sum over
// the grid's locations in FP32 (float64 on the CPU), in a fixed order (deterministic).
Tensor affine_grid_backward(const Tensor& dgrid, const Shape& size, bool align_corners = false,
                            const Stream& stream = {});
void affine_grid_backward_into(const Tensor& dtheta_out, const Tensor& dgrid, const Shape& size,
                               bool align_corners = false, const Stream& stream = {});

}  // namespace rudnn
