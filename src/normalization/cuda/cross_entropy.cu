// Cross entropy over the last axis: the loss per row, and (kGrad) the gradient
// dloss * (softmax - onehot) written in the same launch.
//
// Rows that fit a register tile are read once. Longer rows (vocabularies) take the loop
// tile: one pass for the online (max, sum), then, with kGrad, a second pass for the
// gradient. That second pass should hit L2, so a kGrad launch is a persistent grid sized to
// keep the rows in flight within about half of L2.
#include "normalization/cuda/launch.h"
#include "normalization/cuda/row_tile.cuh"

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
    case DType::i32: raw = static_cast<const int32_t*>(p.targets)[row]; break;
    case DType::i64: raw = static_cast<const int64_t*>(p.targets)[row]; break;
    case DType::u32: raw = static_cast<const uint32_t*>(p.targets)[row]; break;
    case DType::u8: raw = static_cast<const uint8_t*>(p.targets)[row]; break;
    default: return {TargetKind::invalid, 0};
  }
  if (p.has_ignore_index && raw == p.ignore_index) return {TargetKind::ignored, 0};
  const int64_t t = raw < 0 ? raw + p.cols : raw;
  if (t < 0 || t >= p.cols) return {TargetKind::invalid, 0};
  return {TargetKind::valid, t};
}

// Rows without a valid target: loss 0 and gradient 0 (ignored) or NaN and NaN (invalid).
template <class T, int W, class ForEachColumn>
__device__ __forceinline__ void write_constant_row(const CrossEntropy& p, int64_t row, float value, bool leader,
                                                   ForEachColumn for_each_column) {
  if (leader && p.loss) p.loss[row] = value;
  if (p.dlogits.data == nullptr) return;
  T* dx = static_cast<T*>(p.dlogits.data) + row * p.dlogits.stride;
  float out[W];
#pragma unroll
  for (int j = 0; j < W; ++j) out[j] = value;
  for_each_column([&](int64_t c) { rudnn::cuda::store_pack<T, W>(dx + c, out); });
}


template <class T, class Tile, bool kGrad>
__global__ void __launch_bounds__(Tile::kBlockThreads, Tile::kMinBlocksPerSm) cross_entropy_tile(CrossEntropy p) {
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
      write_constant_row<T, W>(p, row, target.kind == TargetKind::ignored ? 0.0f : kNaN, t.lane == 0, own_columns);
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
    if (t.lane == 0 && p.loss) p.loss[row] = rudnn::cuda::log_sum_exp({m, s}) - to_float(x[target.index]);
    if constexpr (kGrad) {
      const float scale = p.dloss ? p.dloss[row] : p.grad_scale;
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
  __shared__ float2 scratch[32];
  const int64_t step = static_cast<int64_t>(kThreads) * W;
  auto own_columns = [&](auto&& f) {
    for (int64_t c = static_cast<int64_t>(threadIdx.x) * W; c < p.cols; c += step) f(c);
  };

  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const Target target = read_target(p, row);
    if (target.kind != TargetKind::valid) {
      write_constant_row<T, W>(p, row, target.kind == TargetKind::ignored ? 0.0f : kNaN, threadIdx.x == 0,
                               own_columns);
      continue;
    }
    const T* x = static_cast<const T*>(p.logits.data) + row * p.logits.stride;
    SoftmaxState state{MaxOp::identity(), 0.0f};
    for_each_vector<W, kThreads>(x, p.cols, [&](int64_t, const float (&v)[W]) { rudnn::cuda::fold(state, v); });
    state = group_reduce<kThreads>(state, scratch);
    const bool finite = isfinite(state.max);
    if (threadIdx.x == 0 && p.loss) {
      p.loss[row] = rudnn::cuda::log_sum_exp(state) - to_float(x[target.index]);
    }
    if constexpr (kGrad) {
      const float scale = p.dloss ? p.dloss[row] : p.grad_scale;
      const float inv = 1.0f / state.sum;
      T* dx = static_cast<T*>(p.dlogits.data) + row * p.dlogits.stride;
      for_each_vector<W, kThreads>(x, p.cols, [&](int64_t c, const float (&v)[W]) {
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
  static int l2_bytes[64] = {};
  int& l2 = l2_bytes[device.index];
  if (l2 == 0) check_cuda(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device.index), "cudaDeviceGetAttribute");
  const int sms = multiprocessor_count(device);
  const int64_t row_bytes = p.cols * static_cast<int64_t>(element_size);
  int64_t per_sm = (static_cast<int64_t>(l2) / 2) / (row_bytes * sms);
  // At most the blocks an SM holds at once: a second wave of persistent blocks would start
  // only when the first is done.
  constexpr int64_t kResident = 2048 / kGradLoopThreads;
  per_sm = per_sm < 1 ? 1 : (per_sm > kResident ? kResident : per_sm);
  const int64_t blocks = per_sm * sms;
  return static_cast<unsigned>(blocks < p.rows ? blocks : p.rows);
}

template <class T, bool kGrad>
void launch(const CrossEntropy& p, const Stream& stream) {
  const auto s = reinterpret_cast<cudaStream_t>(stream.handle());
  Alignment a;
  require_rows_aligned(a, p.logits.data, p.logits.stride, sizeof(T));
  if (kGrad) require_rows_aligned(a, p.dlogits.data, p.dlogits.stride, sizeof(T));
  with_tile<T>(p.cols, a, [&](auto tile) {
    using Tile = decltype(tile);
    if constexpr (Tile::kLoop && kGrad) {
      // One 1024-thread block per SM (about): as many loads in flight as the L2 budget allows.
      cross_entropy_loop<T, Tile::kWidth, kGrad, kGradLoopThreads>
          <<<l2_resident_grid(p, sizeof(T), stream.device()), kGradLoopThreads, 0, s>>>(p);
    } else if constexpr (Tile::kLoop) {
      cross_entropy_loop<T, Tile::kWidth, kGrad, kLoopThreads><<<row_grid(p.rows, 1), kLoopThreads, 0, s>>>(p);
    } else {
      cross_entropy_tile<T, Tile, kGrad><<<row_grid(p.rows, Tile::kRowsPerBlock), Tile::kBlockThreads, 0, s>>>(p);
    }
  });
  check_launch("cross_entropy");
}

}  // namespace

void cross_entropy(const CrossEntropy& p, const Stream& stream) {
  rudnn::detail::cuda::DeviceGuard guard(stream.device().index);
  with_float_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (p.dlogits.data != nullptr) {
      launch<T, true>(p, stream);
    } else {
      launch<T, false>(p, stream);
    }
  });
}

}  // namespace rudnn::norm::cuda
