// Transformer family: rotary position embeddings (RoPE) and the gated activations of a
// transformer block's MLP (SwiGLU, GeGLU), with their backward passes.
//
// Common contract (every function below):
// - Dtypes. Tensors are F32, F16 or BF16 (F64 too on the CPU, where the reference computes
//   in float64). Arithmetic runs in FP32 on the GPU (float64 in the CPU reference); each
//   result is rounded once to the input's dtype. Other dtypes are DTypeMismatch.
// - Layout. Inputs of any strides are taken. They are read in place when the last axis is
//   dense and the other axes fit the op's view (rows of one stride for the gated
//   activations; [B, middle, T] axes where the middle ones collapse to one stride for
//   rope); anything else is first copied to a contiguous buffer on the device (one extra
//   pass). Results of the functional forms are new contiguous tensors.
// - Devices and streams. All tensors share one device (else DeviceMismatch); the op runs on
//   `stream` (default: current_stream of that device). No op synchronises the host with the
//   device or reads device data back to decide anything.
// - Memory. No op holds scratch (but norm_rope in some layouts, see there); a kernel makes
//   one pass over its operands.
// - Inputs are never modified (norm_rope's cache is an output). The `_into` forms write
//   caller-allocated outputs that must have the result's shape and dtype, live on the
//   operands' device, have a dense last axis (and the layout named at each op), and overlap
//   no input and no other output (else InvalidArgument). They allocate nothing (norm_rope
//   in some layouts excepted), so they can be captured in a CUDA graph.
// - Zero-size inputs are valid and launch nothing.
// - Errors are rudnn::Error whose message names the op, the argument and the rule.
#pragma once

#include <cstdint>
#include <optional>

#include "rudnn/device.h"
#include "rudnn/stream.h"
#include "rudnn/tensor.h"

namespace rudnn {

// =========================================================================================
// Rotary position embeddings
// =========================================================================================
//
// x is at least 3-d, [B, ..., T, D]: a batch axis first, positions along the second-last
// axis T, D features per position, and any axes between (heads) sharing the positions of
// their (b, t). For each row x[b, ..., t, :] the first `dims` features are rotated in
// dims / 2 pairs and the remaining D - dims features are copied unchanged:
//   traditional = false  pairs (j, j + dims/2)  (GPT-NeoX, Hugging Face Llama: the halves)
//   traditional = true   pairs (2j, 2j + 1)     (the original RoFormer / Meta Llama layout)
// Pair j = (a, b) becomes (a cos φ - b sin φ, a sin φ + b cos φ) with the angle
//   φ = p(b, t) · scale · θ_j,   θ_j = base^(-2j / dims)   or   θ_j = 1 / freqs[j]
// and p(b, t) the token's position:
//   - offset + t                 (default; offset a scalar, >= 0)
//   - offsets[b] + t             (`offsets` given: one start per batch entry, on the device)
//   - positions[t] or positions[b, t]   (`positions` given: position ids, as engines keep
//                                 them; [T] applies to every batch entry)
// Packed variable-length batches ([total, H, D] tokens with positions [total]) are passed
// as the view x.transpose(0, 1) ([H, total, D], read in place) with positions [total]; the
// result can go straight into a [total, H, D] buffer through rope_into(out.transpose(0, 1), ...).
//
// Precision. scale · θ_j and the angle are formed in float64 and reduced to [-π, π] before
// the FP32 sine and cosine (absolute error below 4e-7 on the GPU), so large positions lose
// no accuracy to the angle's rounding; the rotation itself is FP32. Frequencies are
// computed per call, never cached.
//
// Errors: x not at least 3-d (ShapeMismatch); dims odd, < 2 or > D (InvalidArgument); both
// or neither of base and freqs (InvalidArgument); base not finite and > 0, scale not finite
// (InvalidArgument); freqs not F32 (DTypeMismatch) or not [dims / 2] (ShapeMismatch);
// offset < 0 (InvalidArgument); offsets or positions not I32/I64 (DTypeMismatch), offsets
// not [B], positions not [T] or [B, T] (ShapeMismatch); more than one of a non-zero offset,
// offsets and positions (InvalidArgument). Values read on the device (freqs, offsets,
// positions) are not checked: a negative position rotates the other way, freqs[j] = 0 gives
// non-finite values.
struct RopeOptions {
  int64_t dims = 0;           // rotated features: even, 2 <= dims <= D
  bool traditional = false;   // interleaved pairs instead of halves
  std::optional<float> base;  // θ_j = base^(-2j/dims) (e.g. 10000, 500000) ...
  Tensor freqs;               // ... or θ_j = 1 / freqs[j]: F32 [dims / 2], on x's device
  float scale = 1.0f;  // multiplies the positions (linear position interpolation: 1 / factor)
  int64_t offset = 0;  // the first position (a scalar)
  Tensor offsets;      // or one first position per batch entry: I32/I64 [B]
  Tensor positions;    // or the position of every token: I32/I64 [T] or [B, T]

  RopeOptions& set_dims(int64_t d) {
    dims = d;
    return *this;
  }
  RopeOptions& set_traditional(bool t) {
    traditional = t;
    return *this;
  }
  RopeOptions& set_base(float b) {
    base = b;
    return *this;
  }
  RopeOptions& set_freqs(const Tensor& f) {
    freqs = f;
    return *this;
  }
  RopeOptions& set_scale(float s) {
    scale = s;
    return *this;
  }
  RopeOptions& set_offset(int64_t o) {
    offset = o;
    return *this;
  }
  RopeOptions& set_offsets(const Tensor& o) {
    offsets = o;
    return *this;
  }
  RopeOptions& set_positions(const Tensor& p) {
    positions = p;
    return *this;
  }
};

// The rotated x: x's shape and dtype.
Tensor rope(const Tensor& x, const RopeOptions& options, const Stream& stream = {});
// out: x's shape and dtype, a dense last axis, its middle axes (between B and T) collapsing
// to one stride, rows that do not overlap: e.g. a contiguous tensor, the transposed view of
// a [B, T, H, D] buffer, or a slice of a longer last axis (else InvalidArgument).
void rope_into(const Tensor& out, const Tensor& x, const RopeOptions& options,
               const Stream& stream = {});

// Backward of rope: dx = the rotation by -φ of dy (the rotation is orthogonal, so its
// transpose is its inverse; features past dims pass dy through). Also the inverse of rope:
// rope_backward(rope(x, o), o) == x up to rounding. Same options, rules and layout as rope.
Tensor rope_backward(const Tensor& dy, const RopeOptions& options, const Stream& stream = {});
void rope_backward_into(const Tensor& dx_out, const Tensor& dy, const RopeOptions& options,
                        const Stream& stream = {});

// ---- Norm + RoPE + cache write -------------------------------------------------------------
// An attention layer's query or key preparation: each row of x [B, H, L, D] (any strides; a
// transposed [B, L, H, D] projection is read in place) optionally normalised as rms_norm
// with (weight, eps) (per-head norms such as Qwen 3's q_norm / k_norm: weight [D], F32 or
// x's dtype, or undefined for none; eps finite and > 0), then rotated as rope at positions
// offset..offset + L (options.offset; offsets and positions are not taken here).
//
// Without cache the result is a new [B, H, L, D] tensor (x may also have any rank >= 3, as
// for rope). With cache [B, H, C, D] (x's dtype, C >= offset + L, a dense last axis, rows
// that do not overlap) positions offset..offset + L of the cache are overwritten in place
// and the cache is returned; the other positions are untouched.
//
// The result equals rms_norm, rope and the cache update composed, bit for bit on every
// device. On the GPU one kernel does it in one pass (x read once, the destination written
// once, no scratch) when D is a multiple of the 16-byte vector (8 F16/BF16, 4 F32 elements)
// with D <= 1024 (F16/BF16) or D <= 512 (F32), interleaved pairs or halves pairs with
// dims / 2 also a multiple of it, and x (as read: in place, or its dense copy
// for layouts whose middle axes do not collapse), the destination and the weight have
// 16-byte-aligned data and strides that are multiples of that vector; the weight may be F32
// or x's dtype. Every other case (longer heads, unaligned views, the CPU) runs the
// composition in two passes: the norm is written to the destination and rotated there in
// place when the destination is laid out as a new contiguous tensor (the functional form, a
// contiguous 16-byte-aligned _into output, a cache with B·H = 1); otherwise (a cache of
// several heads, other _into layouts) it goes through a temporary of x's size, allocated
// on the stream, and such a call is not for CUDA-graph capture. Without a norm nothing is
// allocated (it is rope).
//
// Errors: those of rope and rms_norm (named norm_rope); offsets or positions given
// (InvalidArgument); with a cache, x not 4-d, the cache not 4-d or of another B, H or D,
// or too short for offset + L (ShapeMismatch), of another dtype (DTypeMismatch), or
// overlapping x or the weight (InvalidArgument).
struct RopeNorm {
  Tensor weight;  // [D], F32 or x's dtype; undefined: no scale
  float eps = 1e-6f;
};
Tensor norm_rope(const Tensor& x, const std::optional<RopeNorm>& norm, const RopeOptions& rotation,
                 const Tensor& cache = {}, const Stream& stream = {});
// out: x's shape and dtype, with rope_into's layout rules.
void norm_rope_into(const Tensor& out, const Tensor& x, const std::optional<RopeNorm>& norm,
                    const RopeOptions& rotation, const Stream& stream = {});

// ---- Frequency scaling helpers --------------------------------------------------------------
// Host computations (float64, rounded to F32) of the `freqs` that rope takes for the
// long-context variants of Hugging Face's rope_scaling, returned as F32 [dims / 2] on
// `device` (uploaded on `stream`). With ω_j = base^(-2j/dims) the unscaled inverse
// frequency and λ_j = 2π / ω_j its wavelength, each returns freqs[j] = 1 / ω'_j.
// Errors: dims not even and >= 2, base not finite and > 1, a factor not finite and > 0,
// original_max_position < 1 (InvalidArgument), and the rules named below.

// Llama 3 ("rope_type": "llama3"; Llama 3.1: base 500000, factor 8, low_freq_factor 1,
// high_freq_factor 4, original_max_position 8192). With L = original_max_position,
// λ_hi = L / high_freq_factor and λ_lo = L / low_freq_factor:
//   λ_j < λ_hi            ω'_j = ω_j                        (high frequencies kept)
//   λ_j > λ_lo            ω'_j = ω_j / factor               (low frequencies interpolated)
//   otherwise             ω'_j = (1 - s) ω_j / factor + s ω_j,
//                         s = (L / λ_j - low_freq_factor) / (high_freq_factor - low_freq_factor)
// high_freq_factor must exceed low_freq_factor.
struct Llama3RopeScaling {
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int64_t original_max_position = 8192;
};
Tensor rope_llama3_freqs(int64_t dims, float base, const Llama3RopeScaling& scaling,
                         Device device = Device::cpu(), const Stream& stream = {});

// YaRN ("rope_type": "yarn"). With L = original_max_position and the correction dimension
//   c(r) = dims · ln(L / (2π r)) / (2 ln base),
// the ramp runs from lo = floor(c(beta_fast)) to hi = ceil(c(beta_slow)) (no floor/ceil
// when truncate is false), clamped to [0, dims - 1] (hi = lo + 0.001 when they meet):
//   ramp_j = clamp((j - lo) / (hi - lo), 0, 1),   e_j = 1 - ramp_j,
//   ω'_j   = ω_j / factor · (1 - e_j) + ω_j · e_j
// (e_j = 1: extrapolated, the original frequency; e_j = 0: interpolated by factor).
// YaRN also scales the rotated features by attention_factor: when mscale and mscale_all_dim
// are both non-zero, m(factor, mscale) / m(factor, mscale_all_dim), else m(factor, 1), with
// m(s, k) = 1 for s <= 1 and 0.1 · k · ln(s) + 1 otherwise (attention_factor, when given
// above 0, is taken as is). rope does not apply it: when dims == D, multiply the attention
// logits' scale by attention_factor² (q and k both carry it), or scale q and k.
// beta_fast must exceed beta_slow, and both must be > 0.
struct YarnRopeScaling {
  float factor = 1.0f;
  int64_t original_max_position = 4096;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  float mscale = 0.0f;            // 0: not set
  float mscale_all_dim = 0.0f;    // 0: not set
  float attention_factor = 0.0f;  // > 0: use this value
  bool truncate = true;
};
struct YarnFreqs {
  Tensor freqs;            // F32 [dims / 2] on the requested device
  float attention_factor;  // the magnitude scale YaRN applies to cos and sin
};
YarnFreqs rope_yarn_freqs(int64_t dims, float base, const YarnRopeScaling& scaling,
                          Device device = Device::cpu(), const Stream& stream = {});

// =========================================================================================
// Gated activations
// =========================================================================================
//
// y = act(gate) * up, elementwise, with
//   swiglu: act(g) = silu(g) = g / (1 + e^(-g))
//   geglu:  act(g) = gelu(g) = g Φ(g) = g/2 (1 + erf(g / √2))            (GeluApproximate::none)
//                 or g/2 (1 + tanh(√(2/π) (g + 0.044715 g³)))               (GeluApproximate::tanh)
// computed in FP32 (act(gate) is not rounded to the dtype before the product).
//
// Two forms:
// - two tensors: gate and up of one shape [..., I] and one dtype; y is [..., I].
// - one tensor: x [..., 2I] (a fused gate/up projection) whose last axis holds the gate in
//   its first half and up in its second: gate = x[..., :I], up = x[..., I:]; y is [..., I].
//   The last axis must be even (else InvalidArgument).
// At least 1-d (else ShapeMismatch). gate and up of different shapes are ShapeMismatch, of
// different dtypes DTypeMismatch. Outputs need a dense last axis and one row stride.
//
// Backward: with dy of y's shape and dtype,
//   dgate = dy · up · act'(gate),   dup = dy · act(gate)
// returned in the inputs' dtype. The one-tensor form returns dx [..., 2I] laid out as x is:
// dgate in the first half of the last axis, dup in the second.
//
// Precision (GPU): FP32 with the SFU exponential (relative error ~1e-6 over the range that
// matters), Φ through erfc (accurate in the lower tail), and the tanh form's (1 + tanh u)/2
// evaluated as the logistic 1 / (1 + e^(-2u)), which equals it and does not cancel for
// negative g. Each op is one pass: reads gate and up (and dy), writes y (or dgate and dup).

enum class GeluApproximate { none, tanh };

Tensor swiglu(const Tensor& gate, const Tensor& up, const Stream& stream = {});
Tensor swiglu(const Tensor& x, const Stream& stream = {});
void swiglu_into(const Tensor& out, const Tensor& gate, const Tensor& up,
                 const Stream& stream = {});
void swiglu_into(const Tensor& out, const Tensor& x, const Stream& stream = {});

Tensor geglu(const Tensor& gate, const Tensor& up,
             GeluApproximate approximate = GeluApproximate::none, const Stream& stream = {});
Tensor geglu(const Tensor& x, GeluApproximate approximate = GeluApproximate::none,
             const Stream& stream = {});
void geglu_into(const Tensor& out, const Tensor& gate, const Tensor& up,
                GeluApproximate approximate = GeluApproximate::none, const Stream& stream = {});
void geglu_into(const Tensor& out, const Tensor& x,
                GeluApproximate approximate = GeluApproximate::none, const Stream& stream = {});

struct GluGrads {
  Tensor dgate, dup;  // gate's shape and dtype
};

GluGrads swiglu_backward(const Tensor& dy, const Tensor& gate, const Tensor& up,
                         const Stream& stream = {});
// One-tensor form: dx [..., 2I] (dgate then dup along the last axis).
Tensor swiglu_backward(const Tensor& dy, const Tensor& x, const Stream& stream = {});
void swiglu_backward_into(const Tensor& dgate_out, const Tensor& dup_out, const Tensor& dy,
                          const Tensor& gate, const Tensor& up, const Stream& stream = {});
// dx_out: x's shape and dtype, a dense last axis and one row stride.
void swiglu_backward_into(const Tensor& dx_out, const Tensor& dy, const Tensor& x,
                          const Stream& stream = {});

GluGrads geglu_backward(const Tensor& dy, const Tensor& gate, const Tensor& up,
                        GeluApproximate approximate = GeluApproximate::none,
                        const Stream& stream = {});
Tensor geglu_backward(const Tensor& dy, const Tensor& x,
                      GeluApproximate approximate = GeluApproximate::none,
                      const Stream& stream = {});
void geglu_backward_into(const Tensor& dgate_out, const Tensor& dup_out, const Tensor& dy,
                         const Tensor& gate, const Tensor& up,
                         GeluApproximate approximate = GeluApproximate::none,
                         const Stream& stream = {});
void geglu_backward_into(const Tensor& dx_out, const Tensor& dy, const Tensor& x,
                         GeluApproximate approximate = GeluApproximate::none,
                         const Stream& stream = {});

}  // namespace rudnn
