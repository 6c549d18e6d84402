// Expert projections addressed by global ids: the ids become local experts (an id outside
// this slice of experts goes to one extra group that no GEMM reads), the rows are dispatched
// by dispatch.cu's stable counting sort (top-1), projected by the strategy's grouped GEMM
// and gathered back to the incoming order (NaN rows for the extra group). The backward
// dispatches dy with the same mapping: dx by a grouped GEMM with the weights read as [k, n],
// the weight gradient by a grouped-K reduction in row order (no atomics).
#include <cstdint>

#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "gemm/gemm.h"
#include "moe/cuda/experts_scalar.cuh"
#include "moe/cuda/launch.h"
#include "rudnn/tensor.h"

namespace rudnn::moe::cuda {

using ::rudnn::cuda::LaunchContext;
using ::rudnn::cuda::with_float_type;

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    local_ids_kernel(const uint32_t* ids, int64_t rows, int64_t start, int64_t experts,
                     uint32_t* local) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (r >= rows) return;
  const int64_t e = static_cast<int64_t>(ids[r]) - start;
  local[r] = static_cast<uint32_t>(e >= 0 && e < experts ? e : experts);
}

// dst[r] = src[row_of_slot[r]] for rows of a real expert, NaN for the extra group.
template <class T>
__global__ void __launch_bounds__(kThreads)
    undispatch_kernel(const T* src, const int32_t* row_of_slot, const uint32_t* local,
                      int64_t experts, int64_t cols, T* dst) {
  const int64_t r = blockIdx.x;
  const bool valid = local[r] < experts;
  const T* from = src + static_cast<int64_t>(row_of_slot[r]) * cols;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads)
    dst[r * cols + c] = valid ? from[c] : ::rudnn::cuda::from_float<T>(::rudnn::cuda::kNaN);
}

struct Mapping {
  const int32_t* offsets;
  const int32_t* row_of_slot;
  const uint32_t* local;
};

// C [rows, n] = A_e . B_e over the real experts' rows, B_e the weight [N, K] used as is
// (y = x . W^T: n = N, k = K) or read as [K, N] (dx = dy . W: n = K, k = N).
void grouped_m(const ExpertProjection& p, const Mapping& m, const void* a, bool transposed, void* c,
               const Stream& stream) {
  const int64_t n = transposed ? p.k : p.n, k = transposed ? p.n : p.k;
  if (p.path == ExpertPath::TensorCore) {
    gemm::GroupedGemmParams g;
    g.dtype = p.dtype;
    g.grouped = gemm::GroupedDim::M;
    g.groups = p.experts;
    g.offsets = m.offsets;
    g.m = p.rows;
    g.n = n;
    g.k = k;
    g.a = {a, gemm::Layout::RowMajor, k};
    g.b = transposed ? gemm::Operand{p.weights, gemm::Layout::RowMajor, n}
                     : gemm::Operand{p.weights, gemm::Layout::ColMajor, k};
    g.b_group_stride = p.n * p.k;
    g.d = c;
    g.ldd = n;
    gemm::grouped_gemm(g, stream);
    return;
  }
  const LaunchContext ctx(stream);
  scalar::GroupedGemm g;
  g.experts = p.experts;
  g.n = n;
  g.k = k;
  g.offsets = m.offsets;
  g.a = a;
  g.b = p.weights;
  g.b_n = transposed ? 1 : p.k;
  g.b_k = transposed ? p.k : 1;
  g.c = c;
  with_float_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    scalar::launch<T, scalar::Out::Plain>(g, p.rows, ctx.stream);
  });
}

void undispatch(const ExpertProjection& p, const Mapping& m, const void* src, int64_t cols,
                void* dst, const Stream& stream) {
  const LaunchContext ctx(stream);
  with_float_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    undispatch_kernel<T><<<static_cast<unsigned>(p.rows), kThreads, 0, ctx.stream>>>(
        static_cast<const T*>(src), m.row_of_slot, m.local, p.experts, cols, static_cast<T*>(dst));
  });
}

}  // namespace

void expert_projection(const ExpertProjection& p, const Stream& stream) {
  const LaunchContext ctx(stream);
  const size_t dweight_bytes = static_cast<size_t>(p.experts * p.n * p.k) * sizeof(float);
  if (p.rows == 0) {  // nothing to project; an empty reduction is 0
    if (p.dweights)
      detail::check_cuda(cudaMemsetAsync(p.dweights, 0, dweight_bytes, ctx.stream),
                         "cudaMemsetAsync");
    return;
  }
  // Temporaries, freed stream-ordered after the kernels that use them.
  const auto scratch = [&](const Shape& shape, DType dtype) {
    return Tensor::empty(shape, dtype, ctx.device, stream);
  };
  const Tensor local = scratch({p.rows}, DType::u32),
               offsets = scratch({p.experts + 2}, DType::i32),
               token_of_row = scratch({p.rows}, DType::i32),
               row_of_slot = scratch({p.rows}, DType::i32), xs = scratch({p.rows, p.k}, p.dtype),
               out_rows = scratch({p.rows, p.y ? p.n : p.k}, p.dtype);
  const Mapping m{static_cast<const int32_t*>(offsets.data()),
                  static_cast<const int32_t*>(row_of_slot.data()),
                  static_cast<const uint32_t*>(local.data())};
  local_ids_kernel<<<static_cast<unsigned>((p.rows + kThreads - 1) / kThreads), kThreads, 0,
                     ctx.stream>>>(p.ids, p.rows, p.expert_start, p.experts,
                                   static_cast<uint32_t*>(local.data()));
  detail::check_launch("expert_projection");
  Dispatch d;  // top-1 over experts + 1 groups: the last holds the foreign ids
  d.tokens = p.rows;
  d.top_k = 1;
  d.experts = p.experts + 1;
  d.hidden = p.k;
  d.dtype = p.dtype;
  d.indices = m.local;
  d.input = p.x;
  d.rows = xs.data();
  d.offsets = static_cast<int32_t*>(offsets.data());
  d.token_of_row = static_cast<int32_t*>(token_of_row.data());
  d.row_of_slot = static_cast<int32_t*>(row_of_slot.data());
  dispatch(d, stream);
  if (p.y) {
    grouped_m(p, m, xs.data(), false, out_rows.data(), stream);
    undispatch(p, m, out_rows.data(), p.n, p.y, stream);
    detail::check_launch("expert_projection_forward");
    return;
  }
  const Tensor dys = scratch({p.rows, p.n}, p.dtype);
  Dispatch g = d;  // dy in the same order
  g.hidden = p.n;
  g.input = p.dy;
  g.rows = dys.data();
  gather_rows(g, stream);
  if (p.dx) {
    grouped_m(p, m, dys.data(), true, out_rows.data(), stream);
    undispatch(p, m, out_rows.data(), p.k, p.dx, stream);
  }
  if (p.dweights) {
    if (p.path == ExpertPath::TensorCore) {
      gemm::GroupedGemmParams w;  // dW_e [N, K] = dy_e^T . x_e
      w.dtype = p.dtype;
      w.grouped = gemm::GroupedDim::K;
      w.groups = p.experts;
      w.offsets = m.offsets;
      w.m = p.n;
      w.n = p.k;
      w.k = p.rows;
      w.a = {dys.data(), gemm::Layout::ColMajor, p.n};
      w.b = {xs.data(), gemm::Layout::RowMajor, p.k};
      w.d = p.dweights;
      w.ldd = p.k;
      w.d_group_stride = p.n * p.k;
      w.epilogue.out_dtype = DType::f32;
      gemm::grouped_gemm(w, stream);
    } else {
      with_float_type(p.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        scalar::launch_grouped_k<T>(m.offsets, p.experts, p.n, p.k, dys.data(), xs.data(),
                                    p.dweights, ctx.stream);
      });
    }
  }
  detail::check_launch("expert_projection_backward");
}

}  // namespace rudnn::moe::cuda
