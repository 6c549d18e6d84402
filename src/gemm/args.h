// What every GEMM kernel receives, by value (dense = one group without offsets). Host and
// device. The entry (gemm.cpp) fills it from validated parameters.
#pragma once

#include <cstdint>

namespace rudnn::gemm::kernels {

// Element strides: A(m, k) = a[m * a_m + k * a_k], B(k, n) = b[k * b_k + n * b_n]; D and C
// are row-major (ldd, ldc). m x k is A's whole extent (grouped M: all groups' rows; grouped
// K: all groups' columns), k x n B's per group.
struct GemmArgs {
  int64_t m, n, k;
  int groups;              // 1 for dense
  const int32_t* offsets;  // groups + 1 entries, device; null for dense
  bool grouped_k;          // offsets split K (else M)
  const void* a;
  int64_t a_m, a_k;
  const void* b;
  int64_t b_k, b_n, b_group_stride;
  void* d;
  int64_t ldd, d_group_stride;
  // Epilogue (gemm.h): C read only when beta != 0 (null otherwise); bias, scales may be null.
  const void* c;
  int64_t ldc, c_group_stride;
  const void* bias;
  const float* row_scale;
  const float* col_scale;
  float alpha, beta;
  int activation;    // gemm::Activation
  bool out_f32;      // D, C, bias are f32 (else the operands' dtype)
  bool pair_stores;  // every group's D rows allow one store per (even col, col + 1) pair
  int cluster_m;     // Hopper kernel: blocks per cluster along M sharing B by multicast (1, 2)
  // Cooperative Hopper kernel: D staged through shared memory and written by TMA stores that
  // run on while the next tile's mainloop starts (dense, D in T, 16-byte aligned rows, N a
  // multiple of 8); else stored from registers.
  bool tma_store;
  // Split K (ping-pong Hopper kernel, dense only): each tile's k-blocks in `splits` ranges,
  // computed by different blocks and summed in split order through `partials` (FP32, one
  // tile per output tile) and `semaphores` (one per output tile: call_id << 32 | the splits
  // summed so far). 1 = no split; the pointers are then null.
  int splits;
  float* partials;
  unsigned long long* semaphores;
  unsigned long long call_id;
};

}  // namespace rudnn::gemm::kernels
