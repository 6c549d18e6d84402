// State pools on the device (the *_slots forms): sequence b's state is slot slots[b] of the
// pool, and the ids are checked by the kernels themselves, since the host cannot read them
// without a synchronisation.
#pragma once

#include <cstdint>

#include "gated_delta/problem.h"

namespace rudnn::gdn::cuda {

// Sequence b's slot id (I32 or I64).
__device__ __forceinline__ int64_t slot_at(const Recurrence& p, int64_t b) {
  return p.slot_dtype == DType::i32 ? int64_t(static_cast<const int32_t*>(p.slots)[b])
                                    : static_cast<const int64_t*>(p.slots)[b];
}

// Whether slot id `id` may be used: inside the pool and named by exactly one sequence. An
// unusable id makes its sequence a no-op on the pool (no out-of-bounds access, no two
// sequences racing on one state) with NaN outputs. Collective over a warp (every lane of it
// must call, with the same id): one warp scans the ids, B / 32 loads a lane.
__device__ __forceinline__ bool slot_usable(const Recurrence& p, int64_t id) {
  if (id < 0 || id >= p.pool_slots) return false;
  unsigned named = 0;
  for (int64_t i = threadIdx.x % 32; i < p.batch; i += 32) named += slot_at(p, i) == id;
  return __reduce_add_sync(0xffffffffu, named) == 1;
}

}  // namespace rudnn::gdn::cuda
