// The tensor-core MLA kernel (mla_tc.cuh) as seen from the host: which problems it takes, its
// grid, and its entry point. Plain C++ (paged_attention.cpp sizes the split history with it).
#pragma once

#include <cstdint>
#include <initializer_list>

#include "paged_attention/problem.h"
#include "rudnn/stream.h"

namespace rudnn::paged::cuda {

// Query rows ((query, head) pairs, query-major) of one block, and keys per tile.
constexpr int64_t kMlaRows = 64;
constexpr int64_t kMlaKeys = 64;

// Whether the tensor-core MLA kernel takes a problem: F16/BF16 MLA with R = 512, P = 64 (the
// DeepSeek shape), values = the latent rows, and q, qp, latent, kp rows on 16-byte boundaries
// (out on 4). Any H, page size and schedule. The device must also run it (mla_tc_usable).
inline bool mla_tc_takes(const PagedForward& p) {
  if (!(p.dtype == DType::bf16 || p.dtype == DType::f16)) return false;
  if (p.heads_kv != 1 || p.dim_qk != 512 || p.dim_pos != 64 || p.dim_v != 512) return false;
  if (p.v.data != p.k.data || p.v.page_stride != p.k.page_stride ||
      p.v.row_stride != p.k.row_stride)
    return false;
  auto aligned = [](const void* data, int64_t bytes, std::initializer_list<int64_t> strides) {
    if (reinterpret_cast<uintptr_t>(data) % static_cast<uintptr_t>(bytes) != 0) return false;
    for (int64_t s : strides)
      if ((s * 2) % bytes != 0) return false;
    return true;
  };
  return aligned(p.q.data, 16, {p.q.batch_stride, p.q.seq_stride, p.q.head_stride}) &&
         aligned(p.qp.data, 16, {p.qp.batch_stride, p.qp.seq_stride, p.qp.head_stride}) &&
         aligned(p.k.data, 16, {p.k.page_stride, p.k.row_stride}) &&
         aligned(p.kp.data, 16, {p.kp.page_stride, p.kp.row_stride}) &&
         aligned(p.out.data, 4, {p.out.batch_stride, p.out.seq_stride, p.out.head_stride});
}

// Blocks of one split partition: work items x row tiles of kMlaRows rows.
inline int64_t mla_tc_row_tiles(const PagedForward& p) {
  return (p.heads_q * p.sched.max_item_queries + kMlaRows - 1) / kMlaRows;
}

// Which form of the kernel runs (tests and the benchmark switch it; not part of the API):
// the warpgroup-MMA one where the build has sm_90a code and the device is a Hopper, else
// mma.sync. wgmma = false forces mma.sync.
struct MlaTuning {
  bool wgmma = true;
};
MlaTuning& mla_tuning();

// Whether the current device runs the kernel (code for sm_80 or later in the build, and the
// shared memory it needs: sm_90's 227 KiB per block). Queried once per device.
bool mla_tc_usable(const Stream& stream);

// Whether the warpgroup-MMA form runs on the current device (sm_90a code in the build).
bool mla_tc_wgmma_usable(const Stream& stream);

// Runs the kernel (and the merge of a split history) if mla_tc_takes and mla_tc_usable;
// returns false (having launched nothing) otherwise.
bool mla_tc_forward(const PagedForward& p, const Stream& stream);

}  // namespace rudnn::paged::cuda
