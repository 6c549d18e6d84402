// Packed vector loads and stores: W consecutive elements in one access (16 bytes when
// W * sizeof(T) == 16), converted to and from FP32 registers.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/types.cuh"

namespace rudnn::cuda {

template <class T, int W>
struct alignas(sizeof(T) * W) Pack {
  T v[W];
};

// A 16-byte pack with every element `value` rounded to T. Built from bits: converting into
// each element would store through the elements' addresses, which keeps a whole array of
// packs in local memory.
template <class T, int W>
__device__ __forceinline__ Pack<T, W> filled_pack(float value) {
  static_assert(sizeof(T) * W == 16, "a 16-byte pack");
  uint32_t word;
  if constexpr (sizeof(T) == 4) {
    word = __float_as_uint(value);
  } else {
    const T rounded = from_float<T>(value);
    uint32_t half_word;
    if constexpr (std::is_same_v<T, __half>) {
      half_word = __half_as_ushort(rounded);
    } else {
      half_word = __bfloat16_as_ushort(rounded);
    }
    word = half_word | (half_word << 16);
  }
  return __builtin_bit_cast(Pack<T, W>, make_uint4(word, word, word, word));
}

// Element j of a pack as FP32. A bf16 is the high half of an FP32, so each element is one
// shift or one mask of the 32-bit word that holds a pair; converting the 16-bit element on
// its own takes an extract and a shift for the high one.
template <class T, int W>
__device__ __forceinline__ float pack_element(const Pack<T, W>& pack, int j) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> && W % 2 == 0) {
    const unsigned word = __builtin_bit_cast(Pack<unsigned, W / 2>, pack).v[j / 2];
    return __uint_as_float(j % 2 == 0 ? word << 16 : word & 0xffff0000u);
  } else {
    return to_float(pack.v[j]);
  }
}

// Loads W elements at p (aligned to W * sizeof(T)) as floats.
template <class T, int W>
__device__ __forceinline__ void load_pack(const T* p, float (&out)[W]) {
  const Pack<T, W> pack = *reinterpret_cast<const Pack<T, W>*>(p);
#pragma unroll
  for (int j = 0; j < W; ++j) out[j] = to_float(pack.v[j]);
}

// W floats rounded to T, as the pack of bits store_pack writes; 16-bit types convert in pairs
// (one instruction per two elements).
template <class T, int W>
__device__ __forceinline__ Pack<T, W> rounded_pack(const float (&in)[W]) {
  if constexpr (sizeof(T) == 2 && W % 2 == 0) {
    Pack<unsigned, W / 2> words;
#pragma unroll
    for (int q = 0; q < W / 2; ++q) words.v[q] = pack_pair<T>(in[2 * q], in[2 * q + 1]);
    return __builtin_bit_cast(Pack<T, W>, words);
  } else {
    Pack<T, W> pack;
#pragma unroll
    for (int j = 0; j < W; ++j) pack.v[j] = from_float<T>(in[j]);
    return pack;
  }
}

// Stores W floats at p (aligned to W * sizeof(T)), rounded to T.
template <class T, int W>
__device__ __forceinline__ void store_pack(T* p, const float (&in)[W]) {
  *reinterpret_cast<Pack<T, W>*>(p) = rounded_pack<T, W>(in);
}

// store_pack of 16 bytes marked as written once (st.global.cs: evict-first in L1 and L2), for
// a result no later work of the kernel reads.
template <class T, int W>
__device__ __forceinline__ void store_pack_streaming(T* p, const float (&in)[W]) {
  static_assert(sizeof(T) * W == 16, "a 16-byte pack");
  __stcs(reinterpret_cast<uint4*>(p), __builtin_bit_cast(uint4, rounded_pack<T, W>(in)));
}

// Loads W elements of an affine parameter stored as T or as float (chosen at run time;
// the branch is uniform across the grid).
template <class T, int W>
__device__ __forceinline__ void load_param(const void* p, bool is_float, int64_t index,
                                           float (&out)[W]) {
  if (is_float) {
    if constexpr (W % 4 == 0) {
#pragma unroll
      for (int q = 0; q < W / 4; ++q) {
        float part[4];
        load_pack<float, 4>(static_cast<const float*>(p) + index + 4 * q, part);
#pragma unroll
        for (int j = 0; j < 4; ++j) out[4 * q + j] = part[j];
      }
    } else {
      load_pack<float, W>(static_cast<const float*>(p) + index, out);
    }
  } else {
    load_pack<T, W>(static_cast<const T*>(p) + index, out);
  }
}

}  // namespace rudnn::cuda
