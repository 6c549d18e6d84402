// Row pieces of q, k, v, dout (and outputs) as FP32 registers: 16 bytes at a time on the
// paths whose rows are aligned for it, element by element otherwise (head sizes whose rows
// are not whole 16-byte vectors, odd strides). The host decides which path a launch takes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "cuda/types.cuh"

namespace rudnn::attn::cuda {

// Elements of T in 16 bytes.
template <class T>
constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

// 16 bytes at p (16-byte aligned, read-only for the kernel's lifetime), as loaded.
template <class T>
__device__ __forceinline__ uint4 load16_raw(const T* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

// The elements of 16 loaded bytes as floats.
template <class T>
__device__ __forceinline__ void convert16(const uint4& raw, float (&f)[kVec16<T>]) {
  const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int e = 0; e < 4; ++e) f[e] = __uint_as_float(w[e]);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    // A bf16 is the high half of an FP32: one shift or one mask per element.
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      f[2 * e] = __uint_as_float(w[e] << 16);
      f[2 * e + 1] = __uint_as_float(w[e] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 pair = __half22float2(*reinterpret_cast<const __half2*>(&w[e]));
      f[2 * e] = pair.x;
      f[2 * e + 1] = pair.y;
    }
  }
}

// 16 bytes at p as floats.
template <class T>
__device__ __forceinline__ void load16(const T* p, float (&f)[kVec16<T>]) {
  convert16<T>(load16_raw<T>(p), f);
}

// Four consecutive elements as loaded: 8 bytes of 16-bit elements, 16 of FP32.
template <class T>
using Raw4 = std::conditional_t<sizeof(T) == 4, uint4, uint2>;

template <class T>
__device__ __forceinline__ Raw4<T> load4_raw(const T* p) {
  return __ldg(reinterpret_cast<const Raw4<T>*>(p));
}

template <class T>
__device__ __forceinline__ void convert4(const Raw4<T>& raw, float (&f)[4]) {
  if constexpr (std::is_same_v<T, float>) {
    f[0] = __uint_as_float(raw.x);
    f[1] = __uint_as_float(raw.y);
    f[2] = __uint_as_float(raw.z);
    f[3] = __uint_as_float(raw.w);
  } else {
    const unsigned w[2] = {raw.x, raw.y};
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        f[2 * e] = __uint_as_float(w[e] << 16);
        f[2 * e + 1] = __uint_as_float(w[e] & 0xffff0000u);
      } else {
        const float2 pair = __half22float2(*reinterpret_cast<const __half2*>(&w[e]));
        f[2 * e] = pair.x;
        f[2 * e + 1] = pair.y;
      }
    }
  }
}

// Four consecutive elements at p (aligned to 4 elements) as floats.
template <class T>
__device__ __forceinline__ void load4(const T* p, float (&f)[4]) {
  convert4<T>(load4_raw<T>(p), f);
}

// Up to four elements at p + 0 .. count - 1 (any alignment), the rest 0.
template <class T>
__device__ __forceinline__ void load_upto4(const T* p, int count, float (&f)[4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) f[e] = e < count ? rudnn::cuda::to_float(p[e]) : 0.0f;
}

// Four floats rounded to T at p (aligned to 4 elements).
template <class T>
__device__ __forceinline__ void store4(T* p, const float (&f)[4]) {
  if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float4*>(p) = make_float4(f[0], f[1], f[2], f[3]);
  } else {
    uint2 raw;
    raw.x = rudnn::cuda::pack_pair<T>(f[0], f[1]);
    raw.y = rudnn::cuda::pack_pair<T>(f[2], f[3]);
    *reinterpret_cast<uint2*>(p) = raw;
  }
}

// The first `count` (<= 4) floats rounded to T at p (any alignment).
template <class T>
__device__ __forceinline__ void store_upto4(T* p, int count, const float (&f)[4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e)
    if (e < count) p[e] = rudnn::cuda::from_float<T>(f[e]);
}

// Whether a pointer and element strides allow aligned accesses of `bytes`.
inline bool aligned_for(const void* p, int64_t element_bytes, int64_t bytes,
                        std::initializer_list<int64_t> strides) {
  if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) != 0) return false;
  for (int64_t s : strides)
    if ((s * element_bytes) % bytes != 0) return false;
  return true;
}

}  // namespace rudnn::attn::cuda

namespace rudnn::attn::cuda {

// acc[r] += Σ_d row[d] · rows_s[r · stride + d] for r < kRows: the lane's own row of T in
// global memory against kRows FP32 rows in shared memory (read as broadcasts), d ascending.
// `vec`: the row is 16-byte aligned and dim a multiple of 16 bytes of T.
template <class T, int kRows>
__device__ __forceinline__ void dot_rows(const T* row, bool vec, int dim, const float* rows_s,
                                         int stride, float (&acc)[kRows]) {
  if (vec) {
    // Four 16-byte loads in flight per lane before any of them is used.
    constexpr int n = kVec16<T>, kBatch = 4;
    for (int d0 = 0; d0 < dim; d0 += kBatch * n) {
      uint4 raw[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
        if (d0 + u * n < dim) raw[u] = load16_raw<T>(row + d0 + u * n);
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (d0 + u * n >= dim) continue;
        float f[n];
        convert16<T>(raw[u], f);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const float* s = rows_s + r * stride + d0 + u * n;
#pragma unroll
          for (int e = 0; e < n; e += 4) {
            const float4 sv = *reinterpret_cast<const float4*>(s + e);
            acc[r] = fmaf(sv.x, f[e], acc[r]);
            acc[r] = fmaf(sv.y, f[e + 1], acc[r]);
            acc[r] = fmaf(sv.z, f[e + 2], acc[r]);
            acc[r] = fmaf(sv.w, f[e + 3], acc[r]);
          }
        }
      }
    }
  } else {
    for (int d = 0; d < dim; ++d) {
      const float x = rudnn::cuda::to_float(row[d]);
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r] = fmaf(rows_s[r * stride + d], x, acc[r]);
    }
  }
}

// acc[r][c][e] += Σ_jj w[jj][r] · row(jj)[c · 128 + 4 · lane + e] over jj < count (ascending):
// weighted sums of up to 32 rows of T (row(jj) gives each row's address), the lanes
// splitting the features 4 by 4; w is a [32][4] FP32 table in shared memory. `vec`: rows
// aligned to 4 elements and dim a multiple of 4.
template <class T, int kChunks, int kRows, class RowAt>
__device__ __forceinline__ void accumulate_rows(RowAt row_at, int count, const float* w, bool vec,
                                                int dim, int lane,
                                                float (&acc)[kRows][kChunks][4]) {
  if (vec) {
    // Several rows' loads in flight before the products (fewer for wide rows).
    constexpr int kBatch = kChunks >= 8 ? 1 : 8 / kChunks;
    for (int jb = 0; jb < count; jb += kBatch) {
      Raw4<T> raw[kBatch][kChunks];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (jb + u >= count) continue;
        const T* const row = row_at(jb + u);
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const int d = c * 128 + lane * 4;
          if (d < dim) raw[u][c] = load4_raw<T>(row + d);
        }
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (jb + u >= count) continue;
        const float4 w4 = *reinterpret_cast<const float4*>(w + (jb + u) * 4);
        const float wj[4] = {w4.x, w4.y, w4.z, w4.w};
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          if (c * 128 + lane * 4 >= dim) continue;
          float x[4];
          convert4<T>(raw[u][c], x);
#pragma unroll
          for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[r][c][e] = fmaf(wj[r], x[e], acc[r][c][e]);
        }
      }
    }
  } else {
    for (int jj = 0; jj < count; ++jj) {
      const float4 w4 = *reinterpret_cast<const float4*>(w + jj * 4);
      const float wj[4] = {w4.x, w4.y, w4.z, w4.w};
      const T* const row = row_at(jj);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int d = c * 128 + lane * 4;
        float x[4];
        load_upto4<T>(row + d, dim - d, x);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[r][c][e] = fmaf(wj[r], x[e], acc[r][c][e]);
      }
    }
  }
}

}  // namespace rudnn::attn::cuda
