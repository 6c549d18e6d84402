// Validated problems of the transformer family: what the backends (the CPU reference and the
// CUDA kernels) receive. Every pointer is valid for the described extent, every dtype is
// supported, outputs overlap no input. Backends neither re-validate nor throw for user errors.
#pragma once

#include <cstdint>

#include "common/views.h"
#include "rudnn/dtype.h"

namespace rudnn::transformer {

using common::BshdIn;
using common::BshdOut;
using common::RowsIn;
using common::RowsOut;

// Where a token's position p(b, t) comes from.
enum class PositionSource : uint8_t {
  offset,        // offset + t
  offsets,       // positions[b] + t            (positions: [B] dense)
  positions_t,   // positions[t]                (positions: [T] dense)
  positions_bt,  // positions[b * T + t]        (positions: [B, T] dense)
};

// Rotary embedding of x seen as [B, M, T, D]: the views' `batch` is B, `heads` the middle
// axes collapsed to one (M), `seq` the positions T, `dim` D. Pairs j < dims / 2 rotate by
// sign * p(b, t) * w_j, w_j = scale * base^(-2j/dims) (freqs null) or scale / freqs[j].
struct Rope {
  DType dtype = DType::f32;  // x and y (F32, F16, BF16; F64 on the CPU)
  BshdIn x;
  BshdOut y;
  int64_t dims = 0;              // even, 2 <= dims <= D
  bool traditional = false;      // pairs (2j, 2j+1); else (j, j + dims/2)
  bool inverse = false;          // backward: rotate by -angle
  const float* freqs = nullptr;  // [dims / 2] dense, or null: base
  double base = 10000.0;
  double scale = 1.0;
  PositionSource source = PositionSource::offset;
  int64_t offset = 0;
  const void* positions = nullptr;    // offsets or positions, dense
  DType position_dtype = DType::i64;  // i32 or i64
};

// norm_rope in one kernel (CUDA only): each row of rope.x is normalised as rms_norm with
// (weight, eps), rounded to the dtype, then rotated as rope (positions rope.offset + t,
// rope.source offset, not inverse) into rope.y. Taken only where the result is bit for bit
// that composition: F32/F16/BF16, D a multiple of the 16-byte vector W with D / W <= 128
// (rms_norm's warp tiles), dims / 2 a multiple of W for halves pairs, every pointer and
// stride aligned to W elements.
struct NormRope {
  Rope rope;
  const void* weight = nullptr;  // [D] dense, 16-byte aligned, or null: no scale
  bool weight_f32 = true;        // F32, else rope.dtype
  float eps = 1e-6f;
};

enum class GluKind : uint8_t { swiglu, geglu_erf, geglu_tanh };

// y = act(gate) * up over rows x cols.
struct GluForward {
  GluKind kind = GluKind::swiglu;
  int64_t rows = 0, cols = 0;
  DType dtype = DType::f32;
  RowsIn gate, up;
  RowsOut y;
};

// dgate = dy * up * act'(gate), dup = dy * act(gate) over rows x cols.
struct GluBackward {
  GluKind kind = GluKind::swiglu;
  int64_t rows = 0, cols = 0;
  DType dtype = DType::f32;
  RowsIn dy, gate, up;
  RowsOut dgate, dup;
};

}  // namespace rudnn::transformer
