// The backward of the gated delta recurrence on the GPU.
//
// Rows of a value head's state are independent given the step's k, q, g and beta, in the
// backward too (dS_v only ever mixes with k and q), so a block owns a slab of kBwdRows rows of
// one (sequence, value head), each warp kBwdRowsPerWarp of them, lanes splitting Dk as in the
// forward kernel; dS lives in FP32 registers for the whole backward walk. The state at each
// step is needed in reverse order: a first forward pass stores FP32 checkpoints every kChunk
// steps, and each chunk is recomputed forward from its checkpoint into a per-block buffer
// before its steps are walked backwards (recomputing is exact; inverting the update would
// divide by g and lose precision). Cross-row sums (dq, dk, dg, dbeta) go from the warps to
// shared memory to one per-slab partial per step, summed over slabs and over the value heads
// sharing a key head by a second kernel in a fixed order: identical bits run to run.
//
// Every buffer a block owns is laid out per thread (element (r, j) of thread i at
// (r * kPerLane + j) * kBwdThreads + i), so that its loads and stores are coalesced.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gated_delta/cuda/recurrence.cuh"

namespace rudnn::gdn::cuda {

constexpr int kBwdRowsPerWarp = 4;
constexpr int kBwdWarps = 8;
constexpr int kBwdThreads = 32 * kBwdWarps;
constexpr int kBwdRows = kBwdRowsPerWarp * kBwdWarps;
constexpr int64_t kChunk = 32;

__host__ __device__ inline int64_t per_lane_of(int64_t key_dim) {
  const int64_t n = (key_dim + 31) / 32;
  return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : 8;
}

// Where each part of the workspace starts (in floats) and how it is indexed.
struct BackwardLayout {
  int64_t slabs, entries, slots, per_block;  // per_block: floats of one block's state slab
  int64_t q, k, g, b, checkpoints, scratch, total;

  __host__ __device__ explicit BackwardLayout(const Recurrence& p) {
    slabs = (p.value_dim + kBwdRows - 1) / kBwdRows;
    entries = p.cu_seqlens != nullptr ? 1 : p.batch;
    // Sequence n's checkpoints start at slot first_n / kChunk + n with cu_seqlens (disjoint
    // ranges, in bounds even for clamped bad offsets), n * ceil(T / kChunk) without.
    slots = p.cu_seqlens != nullptr ? p.steps / kChunk + p.batch + 1
                                    : p.batch * ((p.steps + kChunk - 1) / kChunk);
    per_block = int64_t(kBwdRows) * 32 * per_lane_of(p.key_dim);
    const int64_t heads_steps = entries * p.steps * p.value_heads;
    q = 0;
    k = q + slabs * heads_steps * p.key_dim;
    g = k + slabs * heads_steps * p.key_dim;
    b = g + slabs * heads_steps;
    checkpoints = b + slabs * heads_steps;
    scratch = checkpoints + slots * p.value_heads * slabs * per_block;
    total = scratch + p.batch * p.value_heads * slabs * kChunk * per_block;
  }
};

template <class T, int kPerLane>
__global__ void __launch_bounds__(kBwdThreads) backward_kernel(const RecurrenceBackward P) {
  const Recurrence& p = P.f;
  const BackwardLayout L(p);
  const int64_t h = int64_t(blockIdx.x) % p.value_heads, b = int64_t(blockIdx.x) / p.value_heads;
  const int64_t slab = blockIdx.y;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t row0 = slab * kBwdRows + int64_t(warp) * kBwdRowsPerWarp;
  const int64_t Dk = p.key_dim, Dv = p.value_dim;
  const int64_t kh = h / (p.value_heads / p.key_heads);
  int64_t entry = b, first = 0, last = p.steps;
  if (p.cu_seqlens != nullptr) {
    entry = 0;
    first = min(max(int64_t(p.cu_seqlens[b]), int64_t(0)), p.steps);
    last = min(max(int64_t(p.cu_seqlens[b + 1]), first), p.steps);
  }
  const int64_t state_base = (b * p.value_heads + h) * Dv * Dk;
  auto state_index = [&](int64_t row, int64_t col) {
    return state_base + (p.state_transposed ? col * Dv + row : row * Dk + col);
  };
  auto slot = [&](int r, int j) { return (r * kPerLane + j) * kBwdThreads + tid; };
  const int64_t first_slot = p.cu_seqlens != nullptr
                                 ? first / kChunk + b
                                 : b * ((p.steps + kChunk - 1) / kChunk);
  auto checkpoint = [&](int64_t m) {
    return P.workspace + L.checkpoints + ((first_slot + m) * p.value_heads + h) * L.slabs *
                                             L.per_block + slab * L.per_block;
  };
  float* const scratch =
      P.workspace + L.scratch + (slab * gridDim.x + blockIdx.x) * kChunk * L.per_block;

  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);

  float s[kBwdRowsPerWarp][kPerLane];
  auto forward_step = [&](int64_t t) {
    const int64_t qk_off = entry * p.qk_b + t * p.qk_t + kh * p.qk_h;
    const int64_t v_off = entry * p.v_b + t * p.v_t + h * p.v_h;
    const int64_t g_off = entry * p.g_b + t * p.g_t + h * p.g_h;
    float g = load_any(p.gate, g_off, p.gate_dtype);
    if (p.log_gate) g = expf(g);
    const float beta = load_any(p.beta, g_off, p.beta_dtype);
    float kk[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t col = lane + 32 * j;
      kk[j] = col < Dk ? to_float(k[qk_off + col]) : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < kBwdRowsPerWarp; ++r) {
      const int64_t row = row0 + r;
      if (row >= Dv) break;  // warp-uniform
      float sk = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        s[r][j] *= g;
        sk = fmaf(s[r][j], kk[j], sk);
      }
      sk = warp_sum(sk);
      const float delta = beta * (to_float(v[v_off + row]) - sk);
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) s[r][j] = fmaf(delta, kk[j], s[r][j]);
    }
  };
  auto save = [&](float* to) {
#pragma unroll
    for (int r = 0; r < kBwdRowsPerWarp; ++r)
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) to[slot(r, j)] = s[r][j];
  };
  auto restore = [&](const float* from) {
#pragma unroll
    for (int r = 0; r < kBwdRowsPerWarp; ++r)
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) s[r][j] = from[slot(r, j)];
  };

  // Pass 1: the checkpoints (rows past Dv and columns past Dk hold zeros throughout).
#pragma unroll
  for (int r = 0; r < kBwdRowsPerWarp; ++r)
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t col = lane + 32 * j, row = row0 + r;
      s[r][j] = (row < Dv && col < Dk)
                    ? load_any(p.state_in, state_index(row, col), p.state_dtype)
                    : 0.0f;
    }
  for (int64_t t = first; t < last; ++t) {
    if ((t - first) % kChunk == 0) save(checkpoint((t - first) / kChunk));
    forward_step(t);
  }

  float ds[kBwdRowsPerWarp][kPerLane];
#pragma unroll
  for (int r = 0; r < kBwdRowsPerWarp; ++r)
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t col = lane + 32 * j, row = row0 + r;
      ds[r][j] = (P.dfinal != nullptr && row < Dv && col < Dk)
                     ? load_any(P.dfinal, state_index(row, col), P.dfinal_dtype)
                     : 0.0f;
    }

  __shared__ float red_q[kBwdWarps][kMaxKeyDim], red_k[kBwdWarps][kMaxKeyDim];
  __shared__ float red_g[kBwdWarps], red_b[kBwdWarps];
  T* dv = static_cast<T*>(P.dv);
  const int64_t chunks = (last - first + kChunk - 1) / kChunk;
  for (int64_t m = chunks - 1; m >= 0; --m) {
    const int64_t c0 = first + m * kChunk, c1 = min(c0 + kChunk, last);
    restore(checkpoint(m));
    for (int64_t t = c0; t < c1; ++t) {
      save(scratch + (t - c0) * L.per_block);
      forward_step(t);
    }
    for (int64_t t = c1 - 1; t >= c0; --t) {
      const float* prev = scratch + (t - c0) * L.per_block;
      const int64_t qk_off = entry * p.qk_b + t * p.qk_t + kh * p.qk_h;
      const int64_t v_off = entry * p.v_b + t * p.v_t + h * p.v_h;
      const int64_t g_off = entry * p.g_b + t * p.g_t + h * p.g_h;
      float g = load_any(p.gate, g_off, p.gate_dtype);
      if (p.log_gate) g = expf(g);
      const float beta = load_any(p.beta, g_off, p.beta_dtype);
      float kk[kPerLane], qq[kPerLane], dq[kPerLane], dk[kPerLane];
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int64_t col = lane + 32 * j;
        kk[j] = col < Dk ? to_float(k[qk_off + col]) : 0.0f;
        qq[j] = col < Dk ? to_float(q[qk_off + col]) * p.scale : 0.0f;
        dq[j] = dk[j] = 0.0f;
      }
      float dgate = 0.0f, dbeta = 0.0f;
#pragma unroll
      for (int r = 0; r < kBwdRowsPerWarp; ++r) {
        const int64_t row = row0 + r;
        if (row >= Dv) break;  // warp-uniform
        float sp[kPerLane], before[kPerLane];
        float sk = 0.0f;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
          before[j] = prev[slot(r, j)];
          sp[j] = before[j] * g;
          sk = fmaf(sp[j], kk[j], sk);
        }
        sk = warp_sum(sk);
        const float vr = to_float(v[v_off + row]);
        const float delta = beta * (vr - sk);
        const float dyr = load_any(P.dy, v_off + row, P.dy_dtype);
        float dd = 0.0f;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
          const float now = fmaf(delta, kk[j], sp[j]);
          ds[r][j] = fmaf(dyr, qq[j], ds[r][j]);
          dq[j] = fmaf(now, dyr, dq[j]);
          dd = fmaf(ds[r][j], kk[j], dd);
        }
        dd = warp_sum(dd);
        if (lane == 0) dv[v_off + row] = from_float<T>(beta * dd);
        dbeta = fmaf(dd, vr - sk, dbeta);
        const float du = -beta * dd;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
          dk[j] = fmaf(ds[r][j], delta, fmaf(sp[j], du, dk[j]));
          const float dsp = fmaf(du, kk[j], ds[r][j]);
          dgate = fmaf(dsp, before[j], dgate);
          ds[r][j] = g * dsp;
        }
      }
      dgate = warp_sum(dgate);
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int col = lane + 32 * j;
        if (col < kMaxKeyDim) {
          red_q[warp][col] = dq[j] * p.scale;
          red_k[warp][col] = dk[j];
        }
      }
      if (lane == 0) {
        red_g[warp] = dgate;
        red_b[warp] = dbeta;
      }
      __syncthreads();
      const int64_t part = ((slab * L.entries + entry) * p.steps + t) * p.value_heads + h;
      for (int64_t c = tid; c < Dk; c += kBwdThreads) {
        float sq = 0.0f, sk = 0.0f;
#pragma unroll
        for (int w = 0; w < kBwdWarps; ++w) {
          sq += red_q[w][c];
          sk += red_k[w][c];
        }
        P.workspace[L.q + part * Dk + c] = sq;
        P.workspace[L.k + part * Dk + c] = sk;
      }
      if (tid == 0) {
        float sg = 0.0f, sb = 0.0f;
#pragma unroll
        for (int w = 0; w < kBwdWarps; ++w) {
          sg += red_g[w];
          sb += red_b[w];
        }
        P.workspace[L.g + part] = sg;
        P.workspace[L.b + part] = sb;
      }
      __syncthreads();
    }
  }

#pragma unroll
  for (int r = 0; r < kBwdRowsPerWarp; ++r)
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t col = lane + 32 * j, row = row0 + r;
      if (row < Dv && col < Dk)
        store_any(P.dstate, state_index(row, col), P.dstate_dtype, ds[r][j]);
    }
}

// Sums the per-slab partials: dq, dk over slabs and the value heads of each key head; dgate
// (times the decay when it is a log) and dbeta over slabs. A grid-stride loop over both.
template <class T>
__global__ void backward_sum_kernel(const RecurrenceBackward P) {
  const Recurrence& p = P.f;
  const BackwardLayout L(p);
  const int64_t group = p.value_heads / p.key_heads;
  const int64_t n_qk = L.entries * p.steps * p.key_heads * p.key_dim;
  const int64_t n_g = L.entries * p.steps * p.value_heads;
  const int64_t slab_stride = L.entries * p.steps * p.value_heads;
  T* dq = static_cast<T*>(P.dq);
  T* dk = static_cast<T*>(P.dk);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_qk + n_g;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (i < n_qk) {
      const int64_t c = i % p.key_dim, rest = i / p.key_dim;
      const int64_t kh = rest % p.key_heads, et = rest / p.key_heads;  // et = e * T + t
      float sq = 0.0f, sk = 0.0f;
      for (int64_t s = 0; s < L.slabs; ++s)
        for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
          const int64_t part = s * slab_stride + et * p.value_heads + h;
          sq += P.workspace[L.q + part * p.key_dim + c];
          sk += P.workspace[L.k + part * p.key_dim + c];
        }
      const int64_t e = et / p.steps, t = et % p.steps;
      const int64_t off = e * p.qk_b + t * p.qk_t + kh * p.qk_h + c;
      dq[off] = from_float<T>(sq);
      dk[off] = from_float<T>(sk);
    } else {
      const int64_t j = i - n_qk;
      const int64_t h = j % p.value_heads, et = j / p.value_heads;
      float sg = 0.0f, sb = 0.0f;
      for (int64_t s = 0; s < L.slabs; ++s) {
        sg += P.workspace[L.g + s * slab_stride + j];
        sb += P.workspace[L.b + s * slab_stride + j];
      }
      const int64_t e = et / p.steps, t = et % p.steps;
      const int64_t off = e * p.g_b + t * p.g_t + h * p.g_h;
      if (p.log_gate) sg *= expf(load_any(p.gate, off, p.gate_dtype));
      store_any(P.dgate, off, P.dgate_dtype, sg);
      store_any(P.dbeta, off, P.dbeta_dtype, sb);
    }
  }
}

template <class T>
void launch_backward(const RecurrenceBackward& p, const Stream& stream) {
  rudnn::cuda::LaunchContext ctx(stream);
  const BackwardLayout L(p.f);
  const dim3 grid(unsigned(p.f.batch * p.f.value_heads), unsigned(L.slabs));
  switch (per_lane_of(p.f.key_dim)) {
    case 1:
      backward_kernel<T, 1><<<grid, kBwdThreads, 0, ctx.stream>>>(p);
      break;
    case 2:
      backward_kernel<T, 2><<<grid, kBwdThreads, 0, ctx.stream>>>(p);
      break;
    case 4:
      backward_kernel<T, 4><<<grid, kBwdThreads, 0, ctx.stream>>>(p);
      break;
    default:
      backward_kernel<T, 8><<<grid, kBwdThreads, 0, ctx.stream>>>(p);
      break;
  }
  detail::check_cuda(cudaGetLastError(), "gated_delta backward launch");
  const int64_t n = L.entries * p.f.steps * (p.f.key_heads * p.f.key_dim + p.f.value_heads);
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, int64_t(1) << 16);
  backward_sum_kernel<T><<<unsigned(blocks), 256, 0, ctx.stream>>>(p);
  detail::check_cuda(cudaGetLastError(), "gated_delta backward sum launch");
}

}  // namespace rudnn::gdn::cuda
