// Rotary embeddings: one pass over x. A thread owns one unit of a row (P rotated pairs, or
// a chunk of the copied tail) and keeps it over every row it visits, so its P frequencies
// are formed once per thread; for each (b, t) it visits, it forms the P angles and their
// sine and cosine once and applies them to the rows of every head of its chunk of heads.
//
// Angles are formed in float64 (w_j = scale · θ_j, then p · w_j reduced to [-π, π]; an FP32
// angle would be off by ~4e-3 at position 10^5) and their sine and cosine by the SFU's
// approximations, accurate to 4e-7 on [-π, π] (sincosf's slow path for large arguments
// would cost a local-memory frame and spills for arguments that never reach it).
#pragma once

#include "transformer/cuda/elementwise.cuh"
#include "transformer/cuda/launch.h"

namespace rudnn::transformer::cuda {

// The rows of x (and y) are [B, M, T] with D elements each; a unit is P pairs of the first
// dims features, or W elements of the copied rest.
struct RopeGrid {
  int64_t rot_units = 0;  // (dims / 2) / P
  int64_t units = 0;      // rot_units + (D - dims) / W
  int64_t heads_per_chunk = 1;
};

__device__ __forceinline__ int64_t load_position(const void* p, DType dtype, int64_t i) {
  return dtype == DType::i32 ? static_cast<int64_t>(static_cast<const int32_t*>(p)[i])
                             : static_cast<const int64_t*>(p)[i];
}

__device__ __forceinline__ double token_position(const Rope& p, int64_t b, int64_t t) {
  switch (p.source) {
    case PositionSource::offsets:
      return static_cast<double>(load_position(p.positions, p.position_dtype, b) + t);
    case PositionSource::positions_t:
      return static_cast<double>(load_position(p.positions, p.position_dtype, t));
    case PositionSource::positions_bt:
      return static_cast<double>(
          load_position(p.positions, p.position_dtype, b * p.x.shape.seq + t));
    default:
      return static_cast<double>(p.offset + t);
  }
}

// The per-pair arithmetic of rope, shared with the fused norm_rope kernel (norm_rope.cu), whose
// result must be bit for bit rope's: the frequency, the angle's sine and cosine, the rotation.

// w_j = scale · θ_j of pair j, in float64.
__device__ __forceinline__ double rope_frequency(const Rope& p, int64_t j, double log2_base) {
  return p.freqs ? p.scale / static_cast<double>(p.freqs[j])
                 : p.scale *
                       exp2(-static_cast<double>(2 * j) / static_cast<double>(p.dims) * log2_base);
}

// sin and cos of pos · w: the angle reduced to [-π, π] in float64, then the SFU's FP32
// approximations (abs error <= 2^-21.4 there). The roundings are spelled out (explicit
// multiply and FMA) so that every kernel that inlines this computes the same bits: left to
// the compiler, a multiply-add may be contracted in one kernel and not in another.
__device__ __forceinline__ void rope_sincos(double pos, double w, float& s, float& c) {
  constexpr double kTwoPi = 6.283185307179586476925;
  constexpr double kInvTwoPi = 0.159154943091895335769;
  const double angle = __dmul_rn(pos, w);
  const double reduced = __fma_rn(-rint(__dmul_rn(angle, kInvTwoPi)), kTwoPi, angle);
  __sincosf(static_cast<float>(reduced), &s, &c);
}

// The pair (a, e) rotated by the angle of cosine c and sine s. Explicit roundings for the
// same reason: a * c - e * s can be contracted as fma(a, c, -(e * s)) or fma(-e, s, a * c),
// which is the likely cause of the last-bit differences between rope's kernel and the fused
// norm_rope that round 37 found for interleaved pairs (RESULTS.md).
struct RotatedPair {
  float a, e;
};
__device__ __forceinline__ RotatedPair rope_rotate(float a, float e, float c, float s) {
  return {__fmaf_rn(a, c, -__fmul_rn(e, s)), __fmaf_rn(a, s, __fmul_rn(e, c))};
}

// P pairs per unit: halves (kTrad false) read P elements at j and P at j + dims/2;
// interleaved pairs (kTrad true) read 2P consecutive elements. kVec: packed accesses.
template <class T, int P, bool kTrad, bool kVec>
__global__ void __launch_bounds__(256) rope_kernel(const Rope p, const RopeGrid g) {
  constexpr int W = kVec ? 16 / sizeof(T) : 1;  // elements per unit of the copied tail
  const int64_t half = p.dims / 2;
  const int64_t rows = p.x.shape.batch * p.x.shape.seq;
  const int64_t seq = p.x.shape.seq;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * g.heads_per_chunk;
  const int64_t m1 =
      m0 + g.heads_per_chunk < p.x.shape.heads ? m0 + g.heads_per_chunk : p.x.shape.heads;
  const int64_t row_step = static_cast<int64_t>(gridDim.x) * blockDim.y;
  const double log2_base = log2(p.base);
  const T* const xs = static_cast<const T*>(p.x.data);
  T* const ys = static_cast<T*>(p.y.data);

  for (int64_t u = threadIdx.x; u < g.units; u += blockDim.x) {
    if (u < g.rot_units) {
      double w[P];
#pragma unroll
      for (int k = 0; k < P; ++k) w[k] = rope_frequency(p, u * P + k, log2_base);
      const int64_t first = kTrad ? u * 2 * P : u * P;  // the unit's first element (a's)
      for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; r < rows;
           r += row_step) {
        const int64_t b = r / seq, t = r - b * seq;
        const double pos = token_position(p, b, t);
        float c[P], s[P];
#pragma unroll
        for (int k = 0; k < P; ++k) {
          rope_sincos(pos, w[k], s[k], c[k]);
          if (p.inverse) s[k] = -s[k];
        }
        const T* x = xs + b * p.x.batch_stride + t * p.x.seq_stride + first;
        T* y = ys + b * p.y.batch_stride + t * p.y.seq_stride + first;
        for (int64_t m = m0; m < m1; ++m) {
          const T* xm = x + m * p.x.head_stride;
          T* ym = y + m * p.y.head_stride;
          float a[P], e[P];
          if constexpr (kTrad) {
            float v[2 * P];
            load_n<T, 2 * P, kVec>(xm, v);
#pragma unroll
            for (int k = 0; k < P; ++k) {
              a[k] = v[2 * k];
              e[k] = v[2 * k + 1];
            }
#pragma unroll
            for (int k = 0; k < P; ++k) {
              const RotatedPair r = rope_rotate(a[k], e[k], c[k], s[k]);
              v[2 * k] = r.a;
              v[2 * k + 1] = r.e;
            }
            store_n<T, 2 * P, kVec>(ym, v);
          } else {
            load_n<T, P, kVec>(xm, a);
            load_n<T, P, kVec>(xm + half, e);
            float ya[P], ye[P];
#pragma unroll
            for (int k = 0; k < P; ++k) {
              const RotatedPair r = rope_rotate(a[k], e[k], c[k], s[k]);
              ya[k] = r.a;
              ye[k] = r.e;
            }
            store_n<T, P, kVec>(ym, ya);
            store_n<T, P, kVec>(ym + half, ye);
          }
        }
      }
    } else {
      const int64_t first = p.dims + (u - g.rot_units) * W;
      for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; r < rows;
           r += row_step) {
        const int64_t b = r / seq, t = r - b * seq;
        const T* x = xs + b * p.x.batch_stride + t * p.x.seq_stride + first;
        T* y = ys + b * p.y.batch_stride + t * p.y.seq_stride + first;
        for (int64_t m = m0; m < m1; ++m) {
          if constexpr (kVec) {
            *reinterpret_cast<Pack<T, W>*>(y + m * p.y.head_stride) =
                *reinterpret_cast<const Pack<T, W>*>(x + m * p.x.head_stride);
          } else {
            y[m * p.y.head_stride] = x[m * p.x.head_stride];
          }
        }
      }
    }
  }
}

// Picks the vector width and the split of heads, and launches.
template <class T>
void launch_rope(const Rope& p, const LaunchContext& ctx) {
  constexpr int Wv = 16 / sizeof(T);
  Alignment a{Wv, sizeof(T)};
  a.pointer(p.x.data);
  a.pointer(p.y.data);
  for (const auto& [s, n] :
       {std::pair{p.x.batch_stride, p.x.shape.batch}, std::pair{p.x.seq_stride, p.x.shape.seq},
        std::pair{p.x.head_stride, p.x.shape.heads}, std::pair{p.y.batch_stride, p.y.shape.batch},
        std::pair{p.y.seq_stride, p.y.shape.seq}, std::pair{p.y.head_stride, p.y.shape.heads}}) {
    a.stride(s, n);
  }
  a.count(p.x.shape.dim);
  a.count(p.traditional ? p.dims : p.dims / 2);
  const bool vec = a.ok;
  const int pairs = vec ? (p.traditional ? Wv / 2 : Wv) : 1;  // P
  RopeGrid g;
  g.rot_units = p.dims / 2 / pairs;
  g.units = g.rot_units + (p.x.shape.dim - p.dims) / (vec ? Wv : 1);

  const int64_t rows = p.x.shape.batch * p.x.shape.seq, heads = p.x.shape.heads;
  const int sms = ::rudnn::cuda::device_info(ctx.device).multiprocessors;
  const int64_t resident = static_cast<int64_t>(sms) * 2048;
  // Split the heads over grid.y only when the (b, t) rows alone leave the device idle.
  int64_t chunks = resident / (rows * g.units > 0 ? rows * g.units : 1);
  chunks = chunks < 1 ? 1 : (chunks > heads ? heads : chunks);
  if (chunks > 65535) chunks = 65535;
  g.heads_per_chunk = (heads + chunks - 1) / chunks;
  chunks = (heads + g.heads_per_chunk - 1) / g.heads_per_chunk;
  const dim3 block = row_block(g.units);
  const int64_t most = (static_cast<int64_t>(sms) * 16 + chunks - 1) / chunks;
  const dim3 grid(row_blocks(rows, block, most), static_cast<unsigned>(chunks));

  if (vec) {
    if (p.traditional) {
      rope_kernel<T, Wv / 2, true, true><<<grid, block, 0, ctx.stream>>>(p, g);
    } else {
      rope_kernel<T, Wv, false, true><<<grid, block, 0, ctx.stream>>>(p, g);
    }
  } else {
    if (p.traditional) {
      rope_kernel<T, 1, true, false><<<grid, block, 0, ctx.stream>>>(p, g);
    } else {
      rope_kernel<T, 1, false, false><<<grid, block, 0, ctx.stream>>>(p, g);
    }
  }
  detail::check_launch("rope");
}

}  // namespace rudnn::transformer::cuda
