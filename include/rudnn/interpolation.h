// Interpolation: resizing [N, C, *spatial] inputs with PyTorch's torch.nn.functional.interpolate
// semantics, option for option, forward and backward.
//
// Modes (InterpolateMode) and the input rank each takes (as torch):
//   nearest        3-, 4- or 5-d; torch's legacy rule: src = min(floor(dst * r), in - 1)
//   nearest_exact  3-, 4- or 5-d; src = min(floor((dst + 0.5) * r), in - 1)
//   linear         3-d [N, C, L]           two taps per axis
//   bilinear       4-d [N, C, H, W]
//   trilinear      5-d [N, C, D, H, W]
//   bicubic        4-d; four taps per axis, A = -0.75, taps beyond the border clamped to the
//                  edge pixel (as torch), so values may overshoot the input's range
//   area           3-, 4- or 5-d; adaptive average pooling to the output size (the window of
//                  output o along an axis is [floor(o * in / out), ceil((o + 1) * in / out)))
//
// Source positions. r is the scale of each axis: with align_corners (linear modes and
// bicubic), r = (in - 1) / (out - 1) (0 when out = 1) and src = dst * r; otherwise r =
// 1 / scale_factor when a scale factor is given and not recomputed (torch passes it to the
// kernel), else in / out, and src = (dst + 0.5) * r - 0.5 (clamped at 0 for the linear modes,
// not for bicubic). So a scale factor of 1.5 on 10 pixels gives 15 outputs sampled with r =
// 1/1.5, the same as size 15; a factor of 2.3 on 10 gives 23 outputs sampled with 1/2.3, not
// with 10/23 (recompute_scale_factor = true gives 10/23). As torch's CUDA kernels, r and the
// source positions are FP32 on the GPU and the nearest modes compute their index in FP32 on
// every device, so the chosen pixels match torch's bit for bit; the linear and cubic weights
// of the CPU reference are computed in float64.
//
// Antialias (options.antialias, torch's antialias=True; bilinear and bicubic only, so 4-d
// input): along each axis with scale r (the r above: align_corners, a given scale factor or
// in / out), output o reads the inputs j in a window around center = r * (o + 0.5): support
// = h * max(r, 1) with h = 1 (bilinear) or 2 (bicubic), the window [max(int(center - support +
// 0.5), 0), min(int(center + support + 0.5), in)) (int(): truncation toward zero, as torch),
// at most 2 * ceil(support) + 1 long, and weight(j) = filter((j - center + 0.5) / max(r, 1))
// divided by the window's sum (a sum of 0 leaves the weights as they are). Filters: the
// triangle max(0, 1 - |x|) and Keys' cubic with A = -0.5 (not plain bicubic's -0.75). The two
// axes' weights multiply (separable). Downsampling averages over the stretched filter (no
// aliasing); upsampling bilinear gives plain bilinear's numbers. When neither axis changes
// size the result is a copy (as torch's CPU kernels and its CUDA backward). Precision: the
// CPU reference computes windows and weights in float64; the GPU in FP32 with torch's CUDA
// arithmetic (FP32 center and truncations, so the windows match torch's), FP32 accumulation,
// one rounding per output (torch's F16/BF16 CUDA kernel rounds its weights and row sums to the
// dtype: expect its results to differ from these in the dtype's last bits). GPU memory: a
// workspace of 4 x (Ho x (2 + Kh) + Wo x (2 + Kw)) bytes (K = 2 * ceil(support) + 1 of the
// axis: the per-output window and normalised weights), allocated on `stream` by each call and
// freed stream-ordered after its kernels. Backward: the deterministic gather, whatever
// options.deterministic says.
//
// Output size: options.size, or floor(in * scale_factor) per axis. One of the two must be given
// (not both), with one entry per spatial axis or a single entry for all of them (as torch's
// int argument).
//
// Dtypes: F32/F16/BF16 on the GPU (FP32 arithmetic, one rounding per output); F64 and the same
// three on the CPU, where the float64 reference computes. Inputs of any strides are taken (odd
// layouts, channels-last included, are read through one dense copy on the device); outputs
// are contiguous. Each spatial size (input and output) must be below 2^31; element counts
// beyond 2^31 are fine (64-bit offsets). Memory: outputs only, no workspace (antialias: its
// weight tables, above). All work is queued on `stream`; nothing
// synchronises the host.
//
// Backward. interpolate_backward is the adjoint of interpolate: dinput[i] = sum over outputs o
// of weight(o, i) * dout[o], with the forward's weights. By default every input-gradient
// element gathers its contributing outputs in a fixed order (deterministic: identical bits
// run to run; no atomics). options.deterministic = false selects, for F32 on the GPU in the
// nearest, linear and cubic modes without antialias, a scatter with FP32 atomic adds into the
// zeroed gradient (one thread per output, as torch's CUDA kernels): faster when many outputs
// share an input (large upsampling factors), but the order of the sums, so the last bits, may
// vary run to run. For F16/BF16, for area, for antialias, for bilinear upsampling by exactly 2
// without align_corners (a dedicated gather kernel, faster than the scatter) and on the CPU the
// gather always runs (16-bit atomic accumulators would lose precision; area's windows are
// already gathers; antialias windows hold few outputs per input when downsampling, where it
// is used).
//
// Divergences from torch: inputs must carry the batch axis (add a batch of 1 for unbatched
// input); with antialias, a scale factor that keeps one axis's size but not the other's (1.05
// on 10 pixels) samples that axis with 1 / scale as torch's CUDA forward does (its CPU kernels
// copy the axis), and no window length is refused (torch's CUDA kernels refuse scales whose
// windows overflow shared memory); torch's CPU nearest kernels return dst itself when
// out == in (and dst / 2 when out == 2 * in) where its CUDA kernels, and this library, apply
// the rule above (they differ only when a scale factor disagrees with in / out, e.g. 1.0001).
//
// Errors (rudnn::Error naming op, argument and rule, before any output is written): input not
// 3-, 4- or 5-d, or with an empty axis other than the batch (N = 0 gives empty outputs); a mode
// outside the enum or taking another rank (bilinear on 3-d input, say); neither or both of
// size and scale_factor; a list whose length is neither 1 nor the spatial rank; size <= 0; a
// scale factor <= 0, NaN or infinite; an output size <= 0 (floor(in * scale) = 0) or a size
// >= 2^31; recompute_scale_factor with an explicit size; align_corners set (even to false) for
// nearest, nearest_exact or area; antialias with a mode other than bilinear and bicubic;
// dtypes other than F32/F16/BF16/F64, F64 on the GPU, or operands on different devices; for
// the backward: dout of another shape than the output computed from input_shape
// (ShapeMismatch); _into outputs of the wrong shape or dtype, not contiguous, or overlapping
// an input.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "rudnn/stream.h"
#include "rudnn/tensor.h"

namespace rudnn {

enum class InterpolateMode { nearest, nearest_exact, linear, bilinear, trilinear, bicubic, area };

struct InterpolateOptions {
  InterpolateMode mode = InterpolateMode::nearest;
  std::vector<int64_t> size;         // output spatial sizes (1 or spatial-rank entries), or empty
  std::vector<double> scale_factor;  // per-axis factors (1 or spatial-rank entries), or empty
  // Linear modes and bicubic only; unset means false. Setting it for another mode is an
  // error, as in torch.
  std::optional<bool> align_corners;
  // With scale_factor: the source positions use in / out instead of 1 / scale_factor (the
  // output size is floor(in * scale_factor) either way).
  bool recompute_scale_factor = false;
  // torch's antialias=True: bilinear and bicubic only (see "Antialias" at the top of this file).
  bool antialias = false;
  // Backward only: false allows the atomic scatter (see the top of this file).
  bool deterministic = true;
};

// The output shape [N, C, out...] interpolate gives `input_shape` under `options`; throws the
// errors above that concern shapes and options (op name "interpolate").
Shape interpolate_output_shape(const Shape& input_shape, const InterpolateOptions& options);

// out[n, c, o...] = sum over the taps of o of the product of the per-axis weights times input.
// input [N, C, *in] -> out [N, C, *out] in input's dtype. GPU: one thread per 1 or 4
// consecutive outputs of a row, each computing its column weights once and walking rows
// (antialias: weight tables built by a first kernel, then one thread per output column).
Tensor interpolate(const Tensor& input, const InterpolateOptions& options,
                   const Stream& stream = {});
void interpolate_into(const Tensor& out, const Tensor& input, const InterpolateOptions& options,
                      const Stream& stream = {});

// Gradient of interpolate with respect to its input, given dout [N, C, *out] (dout's dtype);
// input_shape is the forward input's shape [N, C, *in]. Deterministic gather by default; see
// `deterministic` above for the atomic scatter.
Tensor interpolate_backward(const Tensor& dout, const Shape& input_shape,
                            const InterpolateOptions& options, const Stream& stream = {});
void interpolate_backward_into(const Tensor& dinput_out, const Tensor& dout,
                               const Shape& input_shape, const InterpolateOptions& options,
                               const Stream& stream = {});

}  // namespace rudnn
