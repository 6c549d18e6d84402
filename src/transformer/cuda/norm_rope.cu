// norm_rope in one pass: rms_norm of each row, then its rotation, written once.
//
// Bit for bit rms_norm -> rope composed (transformer.h says so): a warp holds a row exactly
// as rms_norm's warp tiles do (RegisterTile<32, V, W>: lane l keeps vectors (i * 32 + l) of W
// elements), its RMS comes from the same function (cuda/rms_row.cuh) with the same order of
// sums, the normalised value is rounded to the dtype as rms_norm stores it, and the rotation
// uses rope's own frequency, angle and rotation functions (rope.cuh).
//
// A warp serves one (b, t) and a chunk of heads: the sines and cosines of its elements are
// formed once per (b, t) and reused for every head, as rope does. Halves pairs (j, j + dims/2)
// sit in other lanes, so each normalised row goes through the warp's slice of shared memory;
// interleaved pairs (2j, 2j + 1) sit in one vector of one lane and need no exchange.
#include "cuda/rms_row.cuh"
#include "transformer/cuda/rope.cuh"

namespace rudnn::transformer::cuda {

namespace {

constexpr int kWarps = 4;  // warps per block
constexpr int kBlockThreads = kWarps * 32;
// Blocks per SM that __launch_bounds__ asks registers for: V = 1 at 80 registers (24 warps
// an SM, each with 4 rows in flight), V = 2 at 128, V = 4 at 168, the most that did not spill.
template <int V>
constexpr int kMinBlocks = V == 1 ? 6 : (V == 2 ? 4 : 3);

template <class T, int V, bool kTrad>
__global__ void __launch_bounds__(kBlockThreads, kMinBlocks<V>)
    norm_rope_kernel(const NormRope q, const int64_t heads_per_chunk) {
  constexpr int W = 16 / sizeof(T);
  // Rows of a head chunk loaded before the first is used: 16 packs per lane in flight at
  // most, since a warp keeps a single row (rms_norm's layout) and one row of 128 bf16 is only
  // 256 bytes.
  constexpr int U = V == 1 ? 4 : (V == 2 ? 2 : 1);
  using Packed = Pack<T, W>;
  // Per warp: the cosines and sines of its (b, t) (dims / 2 each), then, for halves pairs, one
  // normalised row of D floats.
  extern __shared__ float4 shared_storage[];

  const Rope& p = q.rope;
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int cols = static_cast<int>(p.x.shape.dim);
  const int dims = static_cast<int>(p.dims), half = dims / 2;
  const float inv_cols = 1.0f / static_cast<float>(cols);  // as rms_norm's tile forms it
  float* const cos_table =
      reinterpret_cast<float*>(shared_storage) + warp * (dims + (kTrad ? 0 : cols));
  float* const sin_table = cos_table + half;
  float* const staged = sin_table + half;
  auto column = [&](int i) { return (i * 32 + lane) * W; };
  auto valid = [&](int i) { return column(i) < cols; };

  float g[V][W];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    if (q.weight != nullptr && valid(i)) {
      ::rudnn::cuda::load_param<T, W>(q.weight, q.weight_f32, column(i), g[i]);
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k) g[i][k] = 1.0f;
    }
  }

  const double log2_base = log2(p.base);
  const int64_t seq = p.x.shape.seq, rows = p.x.shape.batch * seq;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * heads_per_chunk;
  const int64_t m1 =
      m0 + heads_per_chunk < p.x.shape.heads ? m0 + heads_per_chunk : p.x.shape.heads;
  const T* const xs = static_cast<const T*>(p.x.data);
  T* const ys = static_cast<T*>(p.y.data);

  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + warp; r < rows;
       r += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t b = r / seq, t = r - b * seq;
    // The warp's cosines and sines, one per pair, shared out through shared memory: each pair
    // is formed once (halves pairs are needed by two lanes), and no lane holds the float64
    // temporaries of several angles at once.
    const double pos = token_position(p, b, t);
    for (int j = lane; j < half; j += 32)
      rope_sincos(pos, rope_frequency(p, j, log2_base), sin_table[j], cos_table[j]);
    __syncwarp();
    // Each element's. Interleaved: the even element's (the odd one's are the same pair's).
    // Halves: a vector lies wholly in [0, half), [half, dims) or [dims, D) (half is a multiple
    // of W), its pairs j0 .. j0 + W - 1 consecutive.
    float c[V][W], s[V][W];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int col = column(i);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        c[i][k] = 1.0f;
        s[i][k] = 0.0f;
      }
      if (!valid(i) || col >= dims) continue;
      if constexpr (kTrad) {
#pragma unroll
        for (int k = 0; k < W; k += 2) {
          if (col + k < dims) {
            c[i][k] = cos_table[(col + k) / 2];
            s[i][k] = sin_table[(col + k) / 2];
          }
        }
      } else {
        const int j0 = col < half ? col : col - half;
#pragma unroll
        for (int k = 0; k < W; k += 4) {
          const float4 cv = *reinterpret_cast<const float4*>(cos_table + j0 + k);
          const float4 sv = *reinterpret_cast<const float4*>(sin_table + j0 + k);
          c[i][k] = cv.x, c[i][k + 1] = cv.y, c[i][k + 2] = cv.z, c[i][k + 3] = cv.w;
          s[i][k] = sv.x, s[i][k + 1] = sv.y, s[i][k + 2] = sv.z, s[i][k + 3] = sv.w;
        }
      }
    }
    __syncwarp();  // the next (b, t) rewrites the tables
    const T* const x = xs + b * p.x.batch_stride + t * p.x.seq_stride;
    T* const y = ys + b * p.y.batch_stride + t * p.y.seq_stride;

    for (int64_t m = m0; m < m1; m += U) {
      Packed in[U][V];
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int i = 0; i < V; ++i) {
          if (m + u < m1 && valid(i)) {
            in[u][i] = *reinterpret_cast<const Packed*>(x + (m + u) * p.x.head_stride + column(i));
          } else {
            in[u][i] = ::rudnn::cuda::filled_pack<T, W>(0.0f);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (m + u >= m1) break;  // uniform over the warp
        auto v = [&](int i, int k) { return ::rudnn::cuda::pack_element(in[u][i], k); };
        const float rstd =
            ::rudnn::cuda::rms_row_rstd<32, V, W>(v, valid, inv_cols, q.eps, nullptr);
        // rms_norm's output as stored in the dtype, read back: what rope reads.
        float n[V][W];
#pragma unroll
        for (int i = 0; i < V; ++i)
#pragma unroll
          for (int k = 0; k < W; ++k)
            n[i][k] = ::rudnn::cuda::round_to<T>(::rudnn::cuda::rms_scaled(v(i, k), rstd, g[i][k]));

        float out[V][W];
        if constexpr (kTrad) {
#pragma unroll
          for (int i = 0; i < V; ++i) {
#pragma unroll
            for (int k = 0; k < W; k += 2) {
              if (column(i) + k < dims) {
                const RotatedPair rp = rope_rotate(n[i][k], n[i][k + 1], c[i][k], s[i][k]);
                out[i][k] = rp.a;
                out[i][k + 1] = rp.e;
              } else {
                out[i][k] = n[i][k];
                out[i][k + 1] = n[i][k + 1];
              }
            }
          }
        } else {
#pragma unroll
          for (int i = 0; i < V; ++i) {
            if (!valid(i)) continue;
#pragma unroll
            for (int k = 0; k < W; k += 4)
              *reinterpret_cast<float4*>(staged + column(i) + k) =
                  make_float4(n[i][k], n[i][k + 1], n[i][k + 2], n[i][k + 3]);
          }
          __syncwarp();
#pragma unroll
          for (int i = 0; i < V; ++i) {
            const int col = column(i);
            if (!valid(i) || col >= dims) {
#pragma unroll
              for (int k = 0; k < W; ++k) out[i][k] = n[i][k];
              continue;
            }
            // The partner vector: x[j + half] for a first half, x[j - half] for a second.
            const bool first = col < half;
            const float* partner = staged + (first ? col + half : col - half);
#pragma unroll
            for (int k = 0; k < W; k += 4) {
              const float4 pv = *reinterpret_cast<const float4*>(partner + k);
              const float pk[4] = {pv.x, pv.y, pv.z, pv.w};
#pragma unroll
              for (int q = 0; q < 4; ++q) {
                out[i][k + q] = first ? rope_rotate(n[i][k + q], pk[q], c[i][k + q], s[i][k + q]).a
                                      : rope_rotate(pk[q], n[i][k + q], c[i][k + q], s[i][k + q]).e;
              }
            }
          }
          __syncwarp();  // the next row overwrites the slice
        }
#pragma unroll
        for (int i = 0; i < V; ++i) {
          if (valid(i))
            ::rudnn::cuda::store_pack<T, W>(y + (m + u) * p.y.head_stride + column(i), out[i]);
        }
      }
    }
  }
}

template <class T>
void launch_norm_rope(const NormRope& q, const LaunchContext& ctx) {
  constexpr int W = 16 / sizeof(T);
  const Rope& p = q.rope;
  const int64_t vectors = p.x.shape.dim / W;
  const int64_t rows = p.x.shape.batch * p.x.shape.seq, heads = p.x.shape.heads;
  const int sms = ::rudnn::cuda::device_info(ctx.device).multiprocessors;
  // Every (b, t) a warp; the heads split over grid.y only when that leaves warps idle (64
  // resident per SM).
  const int64_t wanted = static_cast<int64_t>(sms) * 64;
  int64_t chunks = wanted / (rows > 0 ? rows : 1);
  chunks = chunks < 1 ? 1 : (chunks > heads ? heads : chunks);
  if (chunks > 65535) chunks = 65535;
  const int64_t heads_per_chunk = (heads + chunks - 1) / chunks;
  chunks = (heads + heads_per_chunk - 1) / heads_per_chunk;
  // One wave of resident blocks, striding over (b, t) beyond it: the weights are loaded once
  // per warp.
  int64_t blocks = (rows + kWarps - 1) / kWarps;
  const int64_t most = (static_cast<int64_t>(sms) * 16 + chunks - 1) / chunks;
  if (blocks > most) blocks = most;
  if (blocks < 1) blocks = 1;
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(chunks));
  const size_t shared = sizeof(float) * kWarps * (p.dims + (p.traditional ? 0 : p.x.shape.dim));

  auto go = [&](auto kernel) {
    kernel<<<grid, kBlockThreads, shared, ctx.stream>>>(q, heads_per_chunk);
  };
  // rms_norm's warp tiles (row_tile.cuh choose_tile): V = 1, 2, 4 vectors a lane.
  if (vectors <= 32) {
    p.traditional ? go(norm_rope_kernel<T, 1, true>) : go(norm_rope_kernel<T, 1, false>);
  } else if (vectors <= 64) {
    p.traditional ? go(norm_rope_kernel<T, 2, true>) : go(norm_rope_kernel<T, 2, false>);
  } else {
    p.traditional ? go(norm_rope_kernel<T, 4, true>) : go(norm_rope_kernel<T, 4, false>);
  }
  detail::check_launch("norm_rope");
}

}  // namespace

void norm_rope(const NormRope& p, const Stream& stream) {
  const LaunchContext ctx(stream);
  with_float_type(p.rope.dtype,
                  [&](auto tag) { launch_norm_rope<typename decltype(tag)::type>(p, ctx); });
}

}  // namespace rudnn::transformer::cuda
