// Cross entropy over the last axis: the loss per row, and (kGrad) the gradient
// dloss * (softmax - onehot) written in the same launch.
//
// Rows that fit a register tile are read once. Longer rows (vocabularies):
// - forward only: the loop tile, one pass for the online (max, sum);
// - with the gradient, on sm_90+: the cluster kernel, which splits each row across the blocks
//   of a thread-block cluster and keeps it in their registers, so the logits are read from
//   memory once;
// - with the gradient otherwise (or rows too long for a cluster): the loop tile with a
//   second pass for the gradient, on a persistent grid sized so that this pass mostly finds
//   its rows in L2.
#include <cooperative_groups.h>

#include "cuda/cluster.cuh"
#include "normalization/cuda/launch.h"
#include "normalization/cuda/row_tile.cuh"
#include "normalization/cuda/tuning.h"

namespace rudnn::norm::cuda {

namespace {

using rudnn::cuda::group_reduce;
using rudnn::cuda::MaxOp;
using rudnn::cuda::SoftmaxState;
using rudnn::cuda::SumOp;

using rudnn::cuda::kNaN;

enum class TargetKind { valid, ignored, invalid };

struct Target {
  TargetKind kind;
  int64_t index;  // valid targets only: the class in [0, cols)
};

// The target of `row`: ignored rows compare the raw value, then negatives count from the
// end; anything still outside [0, cols) is invalid and never used as an index.
__device__ __forceinline__ Target read_target(const CrossEntropy& p, int64_t row) {
  int64_t raw = 0;
  switch (p.target_dtype) {
    case DType::i32:
      raw = static_cast<const int32_t*>(p.targets)[row];
      break;
    case DType::i64:
      raw = static_cast<const int64_t*>(p.targets)[row];
      break;
    case DType::u32:
      raw = static_cast<const uint32_t*>(p.targets)[row];
      break;
    case DType::u8:
      raw = static_cast<const uint8_t*>(p.targets)[row];
      break;
    default:
      return {TargetKind::invalid, 0};
  }
  if (p.has_ignore_index && raw == p.ignore_index) return {TargetKind::ignored, 0};
  const int64_t t = raw < 0 ? raw + p.cols : raw;
  if (t < 0 || t >= p.cols) return {TargetKind::invalid, 0};
  return {TargetKind::valid, t};
}

// Rows without a valid target: loss 0 and gradient 0 (ignored) or NaN and NaN (invalid).
template <class T, int W, class ForEachColumn>
__device__ __forceinline__ void write_constant_row(const CrossEntropy& p, int64_t row, float value,
                                                   bool leader, ForEachColumn for_each_column) {
  if (leader && p.loss) static_cast<float*>(p.loss)[row] = value;
  if (p.dlogits.data == nullptr) return;
  T* dx = static_cast<T*>(p.dlogits.data) + row * p.dlogits.stride;
  float out[W];
#pragma unroll
  for (int j = 0; j < W; ++j) out[j] = value;
  for_each_column([&](int64_t c) { rudnn::cuda::store_pack<T, W>(dx + c, out); });
}

template <class T, class Tile, bool kGrad>
__global__ void __launch_bounds__(Tile::kBlockThreads, Tile::kMinBlocksPerSm)
    cross_entropy_tile(CrossEntropy p) {
  constexpr int V = Tile::kVecs, W = Tile::kWidth;
  __shared__ float scratch[32];
  const RowThread<Tile> t;
  const int cols = static_cast<int>(p.cols);
  auto own_columns = [&](auto&& f) {
#pragma unroll
    for (int i = 0; i < V; ++i)
      if (t.column(i) < cols) f(static_cast<int64_t>(t.column(i)));
  };

  for (int64_t row = t.first_row(); row < p.rows; row += t.row_step()) {
    const Target target = read_target(p, row);  // uniform over the row's threads
    if (target.kind != TargetKind::valid) {
      write_constant_row<T, W>(p, row, target.kind == TargetKind::ignored ? 0.0f : kNaN,
                               t.lane == 0, own_columns);
      continue;
    }
    const T* x = static_cast<const T*>(p.logits.data) + row * p.logits.stride;
    float v[V][W];
    load_row(t, x, cols, v, -__builtin_huge_valf());
    float m = MaxOp::identity();
#pragma unroll
    for (int i = 0; i < V; ++i)
#pragma unroll
      for (int j = 0; j < W; ++j) m = MaxOp{}(m, v[i][j]);
    m = group_reduce<Tile::kThreadsPerRow>(m, MaxOp{}, scratch);
    const bool finite = isfinite(m);
    float s = 0.0f;
    if (finite) {
#pragma unroll
      for (int i = 0; i < V; ++i)
#pragma unroll
        for (int j = 0; j < W; ++j) {
          v[i][j] = __expf(v[i][j] - m);
          s += v[i][j];
        }
    }
    s = group_reduce<Tile::kThreadsPerRow>(s, SumOp{}, scratch);
    if (t.lane == 0 && p.loss)
      static_cast<float*>(p.loss)[row] =
          rudnn::cuda::log_sum_exp({m, s}) - to_float(x[target.index]);
    if constexpr (kGrad) {
      const float scale = p.dloss ? static_cast<const float*>(p.dloss)[row] : p.grad_scale;
      const float inv = 1.0f / s;
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int c = t.column(i);
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float onehot = c + j == target.index ? 1.0f : 0.0f;
          v[i][j] = finite ? (v[i][j] * inv - onehot) * scale : kNaN;
        }
      }
      store_row(t, static_cast<T*>(p.dlogits.data) + row * p.dlogits.stride, cols, v);
    }
  }
}

template <class T, int W, bool kGrad, int kThreads>
__global__ void __launch_bounds__(kThreads) cross_entropy_loop(CrossEntropy p) {
  __shared__ SoftmaxState scratch[32];
  const int64_t step = static_cast<int64_t>(kThreads) * W;
  auto own_columns = [&](auto&& f) {
    for (int64_t c = static_cast<int64_t>(threadIdx.x) * W; c < p.cols; c += step) f(c);
  };

  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const Target target = read_target(p, row);
    if (target.kind != TargetKind::valid) {
      write_constant_row<T, W>(p, row, target.kind == TargetKind::ignored ? 0.0f : kNaN,
                               threadIdx.x == 0, own_columns);
      continue;
    }
    const T* x = static_cast<const T*>(p.logits.data) + row * p.logits.stride;
    SoftmaxState state{MaxOp::identity(), 0.0f};
    for_each_pack<W, kThreads>(x, p.cols,
                               [&](int64_t, const auto& pack) { rudnn::cuda::fold(state, pack); });
    state = group_reduce<kThreads>(state, rudnn::cuda::SoftmaxMerge{}, scratch);
    const bool finite = isfinite(state.max);
    if (threadIdx.x == 0 && p.loss) {
      static_cast<float*>(p.loss)[row] =
          rudnn::cuda::log_sum_exp(state) - to_float(x[target.index]);
    }
    if constexpr (kGrad) {
      const float scale = p.dloss ? static_cast<const float*>(p.dloss)[row] : p.grad_scale;
      const float inv = 1.0f / state.sum;
      T* dx = static_cast<T*>(p.dlogits.data) + row * p.dlogits.stride;
      for_each_vector<W, kThreads>(x, p.cols, [&](int64_t c, const float(&v)[W]) {
        float out[W];
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float onehot = c + j == target.index ? 1.0f : 0.0f;
          out[j] = finite ? (__expf(v[j] - state.max) * inv - onehot) * scale : kNaN;
        }
        rudnn::cuda::store_pack<T, W>(dx + c, out);
      });
    }
  }
}

constexpr int kGradLoopThreads = 1024;

// Grid of a kGrad loop launch (blocks of kGradLoopThreads): blocks whose rows together take
// about half of L2, at least one per SM, so the gradient pass re-reads each row from L2
// rather than from memory.
unsigned l2_resident_grid(const CrossEntropy& p, size_t element_size, Device device) {
  const int l2 = device_info(device).l2_bytes;
  const int sms = device_info(device).multiprocessors;
  const int64_t row_bytes = p.cols * static_cast<int64_t>(element_size);
  int64_t per_sm = (static_cast<int64_t>(l2) / 2) / (row_bytes * sms);
  // At most the blocks an SM holds at once: a second wave of persistent blocks would start
  // only when the first is done.
  constexpr int64_t kResident = 2048 / kGradLoopThreads;
  per_sm = per_sm < 1 ? 1 : (per_sm > kResident ? kResident : per_sm);
  const int64_t blocks = per_sm * sms;
  return static_cast<unsigned>(blocks < p.rows ? blocks : p.rows);
}

// ---- The cluster kernel -----------------------------------------------------------------------
//
// A vocabulary row is too long for one block's registers but not for a cluster's: the row is
// split over the C blocks of a thread-block cluster, block `rank` owning packs
// [rank * chunk_packs, (rank + 1) * chunk_packs), and thread t of it holding the packs
// rank * chunk_packs + i * kThreads + t (i < kClusterVecs) in registers, as loaded. Per row:
// each block reduces its chunk to (max, sum) and sends that to every block of the cluster
// (st.async into their shared memory, counted on their exchange barrier); each block waits
// for the C states on its own barrier, merges them in rank order (the same bits everywhere)
// and writes its chunk of the gradient from the registers. The logits are read once.
//
// Clusters walk rows cluster_id, cluster_id + clusters, ...; rows without a valid target
// are written without reading the logits or exchanging anything (the target is the same on
// every block of the cluster).
//
// One cluster per row: a block's load, reductions and stores run one after another and
// overlap with those of the other clusters resident on its SM, which hides the latency that a
// prefetching persistent cluster would hide, without halving the packs per buffer (that
// variant lost; bench/RESULTS.md, tuning log).

constexpr int kClusterVecs = 8;     // packs per thread
constexpr int kMaxClusterSize = 8;  // the portable limit

template <class T, int kThreads>
__global__ void __launch_bounds__(kThreads, 1024 / kThreads)
    cross_entropy_grad_cluster(CrossEntropy p, int64_t chunk_packs) {
#if __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  constexpr int W = 16 / sizeof(T), V = kClusterVecs;
  using Packed = rudnn::cuda::Pack<T, W>;
  __shared__ SoftmaxState scratch[32];
  // The C blocks' (max, sum) of a row, in two sets used by alternate exchanges, each with a
  // barrier that completes when all C have landed. A block sends exchange e + 2 into a set
  // only after it has every block's exchange e + 1, which each block sends after it has read
  // exchange e: a set is never overwritten while it is read.
  __shared__ float2 states[2][kMaxClusterSize];
  __shared__ __align__(8) uint64_t exchanged[2];

  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int blocks = static_cast<int>(cluster.num_blocks());
  // This thread's packs: columns first_col + i * kStride, for i < V with i * kThreads < own.
  constexpr int kStride = kThreads * W;
  const int64_t packs = p.cols / W;
  const int64_t first_pack = rank * chunk_packs + threadIdx.x;
  const int64_t own_packs =
      (rank + 1) * chunk_packs < packs ? (rank + 1) * chunk_packs - first_pack : packs - first_pack;
  const int own =
      static_cast<int>(own_packs < 0 ? 0 : (own_packs > V * kThreads ? V * kThreads : own_packs));
  const int64_t first_col = first_pack * W;
  auto owned = [&](int i) { return i * kThreads < own; };
  const Packed negative_infinity =
      rudnn::cuda::filled_pack<T, W>(-__builtin_huge_valf());  // past the row
  auto own_columns = [&](auto&& f) {
#pragma unroll
    for (int i = 0; i < V; ++i)
      if (owned(i)) f(first_col + i * kStride);
  };

  if (threadIdx.x == 0) {
    rudnn::cuda::mbarrier_init(&exchanged[0], 1);
    rudnn::cuda::mbarrier_init(&exchanged[1], 1);
    rudnn::cuda::fence_barrier_init();
  }
  // Every block's barriers must be set up before anyone sends to them; the wait is put off
  // until the first exchange, so that it overlaps the first row's loads.
  cluster.barrier_arrive();
  bool peers_ready = false;

  unsigned exchanges = 0;
  const int64_t clusters = gridDim.x / blocks;
  for (int64_t row = blockIdx.x / blocks; row < p.rows; row += clusters) {
    const Target target = read_target(p, row);
    if (target.kind != TargetKind::valid) {
      write_constant_row<T, W>(p, row, target.kind == TargetKind::ignored ? 0.0f : kNaN,
                               rank == 0 && threadIdx.x == 0, own_columns);
      continue;
    }
    const float scale = p.dloss ? static_cast<const float*>(p.dloss)[row]
                                : p.grad_scale;  // loaded early, used last
    const T* x = static_cast<const T*>(p.logits.data) + row * p.logits.stride;
    const T* x_own = x + first_col;
    Packed v[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      if (owned(i)) {
        v[i] = *reinterpret_cast<const Packed*>(x_own + i * kStride);
      } else {
        v[i] = negative_infinity;
      }
    }

    // This thread's (max, sum): the maximum first, then one exp per value.
    float m = MaxOp::identity();
#pragma unroll
    for (int i = 0; i < V; ++i) m = MaxOp{}(m, rudnn::cuda::pack_max(v[i]));
    float s = 0.0f;
    if (m != -__builtin_huge_valf()) {
      const float m_log2e = m * rudnn::cuda::kLog2e;
#pragma unroll
      for (int i = 0; i < V; ++i)
#pragma unroll
        for (int j = 0; j < W; ++j) s += rudnn::cuda::exp_shifted(to_float(v[i].v[j]), m_log2e);
    }
    const SoftmaxState state =
        group_reduce<kThreads>(SoftmaxState{m, s}, rudnn::cuda::SoftmaxMerge{}, scratch);

    SoftmaxState merged = state;
    if (blocks > 1) {  // (st.async needs a cluster of two or more)
      if (!peers_ready) {
        cluster.barrier_wait();
        peers_ready = true;
      }
      const int set = static_cast<int>(exchanges & 1);
      if (threadIdx.x == 0) {
        rudnn::cuda::mbarrier_arrive_expect_bytes(&exchanged[set],
                                                  static_cast<uint32_t>(blocks * sizeof(float2)));
      }
      if (static_cast<int>(threadIdx.x) < blocks) {  // thread r sends to block r
        rudnn::cuda::store_to_peer(
            rudnn::cuda::peer_shared_address(&states[set][rank], threadIdx.x),
            make_float2(state.max, state.sum),
            rudnn::cuda::peer_shared_address(&exchanged[set], threadIdx.x));
      }
      rudnn::cuda::mbarrier_wait(&exchanged[set], (exchanges >> 1) & 1);
      merged = SoftmaxState{MaxOp::identity(), 0.0f};
      for (int r = 0; r < blocks; ++r)
        merged =
            rudnn::cuda::SoftmaxMerge{}(merged, SoftmaxState{states[set][r].x, states[set][r].y});
      ++exchanges;
    }

    const float lse = rudnn::cuda::log_sum_exp(merged);
    // The pack of this thread that holds the target column, and its place in it (-1: none).
    const int64_t target_offset = target.index - first_col;
    int target_pack = -1, target_lane = 0;
    if (target_offset >= 0 && target_offset < V * kStride && target_offset % kStride < W &&
        owned(static_cast<int>(target_offset / kStride))) {
      target_pack = static_cast<int>(target_offset / kStride);
      target_lane = static_cast<int>(target_offset % kStride);
      if (p.loss)
        static_cast<float*>(p.loss)[row] =
            lse - to_float(x[target.index]);  // by the one thread that owns the target
    }
    T* dx = static_cast<T*>(p.dlogits.data) + row * p.dlogits.stride + first_col;
    if (isfinite(merged.max)) {
      // softmax(x) = exp(x - lse) for 16-bit logits (one FFMA and one ex2 per element; the
      // rounding of lse is far below their precision); F32 logits keep exp(x - max) / sum.
      const float inv = 1.0f / merged.sum;
      const float shift_log2e = (sizeof(T) == 2 ? lse : merged.max) * rudnn::cuda::kLog2e;
#pragma unroll
      for (int i = 0; i < V; ++i) {
        if (!owned(i)) continue;
        float softmax[W];
#pragma unroll
        for (int j = 0; j < W; ++j) {
          softmax[j] = rudnn::cuda::exp_shifted(to_float(v[i].v[j]), shift_log2e);
          if (sizeof(T) != 2) softmax[j] *= inv;
        }
        // The one-hot term, by one thread of the cluster: a compare per pack, not per element.
        if (i == target_pack) {
#pragma unroll
          for (int j = 0; j < W; ++j) softmax[j] -= j == target_lane ? 1.0f : 0.0f;
        }
        float out[W];
#pragma unroll
        for (int j = 0; j < W; ++j) out[j] = softmax[j] * scale;
        rudnn::cuda::store_pack<T, W>(dx + i * kStride, out);
      }
    } else {  // a max of +inf or NaN: the row is undefined (its loss is already written)
      write_constant_row<T, W>(p, row, kNaN, false, own_columns);
    }
  }
  if (!peers_ready) cluster.barrier_wait();
  // No block leaves while a peer could still be sending to it.
  cluster.sync();
#endif
}

// The cluster launch for a kGrad problem, one cluster of `size` blocks of kThreads per row,
// if the device can run it: true when launched.
template <class T, int kThreads>
bool launch_grad_cluster_with(const CrossEntropy& p, const LaunchContext& ctx, int size) {
  constexpr int W = 16 / sizeof(T);
  auto kernel = cross_entropy_grad_cluster<T, kThreads>;
  static PerDevice<signed char> hopper;
  if (!built_for_hopper(kernel, ctx.device, hopper)) return false;
  const int64_t packs = p.cols / W;
  const int64_t chunk_packs = (packs + size - 1) / size;

  cudaLaunchConfig_t config{};
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(size);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.blockDim = dim3(kThreads);
  config.stream = ctx.stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  const int64_t most = (int64_t{1} << 30) / size;  // the grid's limit; clusters then walk rows
  const int64_t clusters = p.rows < most ? p.rows : most;
  config.gridDim = dim3(static_cast<unsigned>(clusters * size));
  trace_launch("cross_entropy_grad_cluster", config.gridDim.x, kThreads, 0, clusters, size);
  check_cuda(cudaLaunchKernelEx(&config, kernel, p, chunk_packs), "cross_entropy (cluster launch)");
  return true;
}

// Smallest block and cluster whose registers hold the row: 256 threads in clusters of 2, 4
// or 8, then 512 threads in clusters of 8.
template <class T>
bool launch_grad_cluster(const CrossEntropy& p, const LaunchContext& ctx,
                         const KernelTuning& tuning) {
  constexpr int W = 16 / sizeof(T);
  const int64_t packs = p.cols / W;
  for (int threads : {256, 512}) {
    for (int size = 2; size <= kMaxClusterSize; size *= 2) {
      if (tuning.cluster_size > 0 && size != tuning.cluster_size) continue;
      if (tuning.cluster_threads > 0 && threads != tuning.cluster_threads) continue;
      if (static_cast<int64_t>(size) * threads * kClusterVecs < packs) continue;
      return threads == 256 ? launch_grad_cluster_with<T, 256>(p, ctx, size)
                            : launch_grad_cluster_with<T, 512>(p, ctx, size);
    }
  }
  return false;
}

template <class T, bool kGrad>
void launch(const CrossEntropy& p, const LaunchContext& ctx) {
  Alignment a;
  require_rows_aligned(a, p.logits.data, p.logits.stride, sizeof(T));
  if (kGrad) require_rows_aligned(a, p.dlogits.data, p.dlogits.stride, sizeof(T));
  with_tile<T>(p.cols, a, [&](auto tile) {
    using Tile = decltype(tile);
    if constexpr (Tile::kLoop && kGrad) {
      const KernelTuning& tuning = kernel_tuning();
      if (Tile::kWidth > 1 && tuning.cluster_cross_entropy &&
          launch_grad_cluster<T>(p, ctx, tuning))
        return;
      // One 1024-thread block per SM (about): as many loads in flight as the L2 budget allows.
      cross_entropy_loop<T, Tile::kWidth, kGrad, kGradLoopThreads>
          <<<l2_resident_grid(p, sizeof(T), ctx.device), kGradLoopThreads, 0, ctx.stream>>>(p);
    } else if constexpr (Tile::kLoop) {
      cross_entropy_loop<T, Tile::kWidth, kGrad, kLoopThreads>
          <<<row_grid(p.rows, 1), kLoopThreads, 0, ctx.stream>>>(p);
    } else {
      cross_entropy_tile<T, Tile, kGrad>
          <<<row_grid(p.rows, Tile::kRowsPerBlock), Tile::kBlockThreads, 0, ctx.stream>>>(p);
    }
  });
  check_launch("cross_entropy");
}

// x *= s, unless s is 1: every block reads s first and leaves at once when it is, so the
// common case costs one launch and no pass over x.
template <class T, int W>
__global__ void scale_unless_one_kernel(ScaleRows p) {
  const float s = *p.scale;
  if (s == 1.0f) return;
  const int64_t per_row = p.cols / W, total = p.rows * per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    T* x = static_cast<T*>(p.x.data) + (i / per_row) * p.x.stride + (i % per_row) * W;
    float v[W];
    rudnn::cuda::load_pack<T, W>(x, v);
#pragma unroll
    for (int j = 0; j < W; ++j) v[j] *= s;
    rudnn::cuda::store_pack<T, W>(x, v);
  }
}

}  // namespace

void scale_unless_one(const ScaleRows& p, const Stream& stream) {
  const LaunchContext ctx(stream);
  with_float_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int W = 16 / sizeof(T);
    Alignment a;
    require_rows_aligned(a, p.x.data, p.x.stride, sizeof(T));
    const bool vectorized = a.ok && p.cols % W == 0;
    const int64_t items = p.rows * (vectorized ? p.cols / W : p.cols);
    const int64_t most = 8 * static_cast<int64_t>(device_info(ctx.device).multiprocessors);
    const int64_t wanted = (items + 255) / 256;
    const unsigned grid = static_cast<unsigned>(wanted < most ? wanted : most);
    if (vectorized) {
      scale_unless_one_kernel<T, W><<<grid, 256, 0, ctx.stream>>>(p);
    } else {
      scale_unless_one_kernel<T, 1><<<grid, 256, 0, ctx.stream>>>(p);
    }
  });
  check_launch("scale_unless_one");
}

void cross_entropy(const CrossEntropy& p, const Stream& stream) {
  const LaunchContext ctx(stream);
  with_float_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (p.dlogits.data != nullptr) {
      launch<T, true>(p, ctx);
    } else {
      launch<T, false>(p, ctx);
    }
  });
}

}  // namespace rudnn::norm::cuda
