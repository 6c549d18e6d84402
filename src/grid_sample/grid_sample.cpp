// Grid sampling family entry points: the family's rules (input rank, grid shape, options,
// affine sizes) on top of the shared checks and views.
#include "rudnn/grid_sample.h"

#include "common/op_call.h"
#include "common/views.h"
#include "grid_sample/problem.h"
#include "grid_sample/reference.h"
#if RUDNN_WITH_CUDA
#include "grid_sample/cuda/launch.h"
#endif

namespace rudnn {

namespace {

using common::OpCall;
using common::require_defined;
using common::require_device;
using common::require_no_overlap;
using common::run_backend;
using detail::cat;
using detail::fail;
using grid_sample_detail::AffineShape;
using grid_sample_detail::SampleShape;

// Same dtype as `ref_name` (every operand of the family shares one dtype).
void require_same_dtype(const OpCall& call, const char* name, const Tensor& t, const char* ref_name,
                        const Tensor& ref) {
  require_defined(call, name, t);
  if (t.dtype() != ref.dtype()) {
    fail(ErrorCode::DTypeMismatch,
         cat(call.op, ": ", name, " has dtype ", dtype_name(t.dtype()), "; expected ", ref_name,
             "'s dtype ", dtype_name(ref.dtype())));
  }
  require_device(call, name, t);
}

void require_options(const OpCall& call, const GridSampleOptions& o, int dims) {
  const int mode = static_cast<int>(o.mode), padding = static_cast<int>(o.padding);
  if (mode < 0 || mode > 2) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": options.mode is ", mode, "; expected bilinear, nearest or bicubic"));
  }
  if (padding < 0 || padding > 2) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": options.padding is ", padding, "; expected zeros, border or reflection"));
  }
  if (o.mode == GridSampleMode::bicubic && dims == 3) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op,
             ": options.mode is bicubic with 5-d input; expected 4-d input (bicubic is 2-D only)"));
  }
}

// The sizes of a sampling problem, every argument but the outputs checked.
SampleShape sample_shape(const OpCall& call, const Tensor& input, const Tensor& grid,
                         const GridSampleOptions& options) {
  common::require_float(call, "input", input);
  if (input.dim() != 4 && input.dim() != 5) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": input has shape ", shape_str(input.shape()),
                                       "; expected 4-d [N, C, H, W] or 5-d [N, C, D, H, W]"));
  }
  const int dims = static_cast<int>(input.dim()) - 2;
  for (int64_t a = 2; a < input.dim(); ++a) {
    if (input.shape()[a] < 1) {
      fail(ErrorCode::InvalidArgument, cat(call.op, ": input has shape ", shape_str(input.shape()),
                                           "; expected non-empty spatial axes"));
    }
  }
  require_same_dtype(call, "grid", grid, "input", input);
  const Shape& g = grid.shape();
  if (grid.dim() != input.dim() || g[0] != input.shape()[0] || g.back() != dims) {
    fail(ErrorCode::ShapeMismatch,
         cat(call.op, ": grid has shape ", shape_str(g), "; expected ",
             dims == 2 ? "[N, Ho, Wo, 2]" : "[N, Do, Ho, Wo, 3]", " with N = ", input.shape()[0]));
  }
  require_options(call, options, dims);
  SampleShape s;
  s.dtype = input.dtype();
  s.dims = dims;
  s.n = input.shape()[0];
  s.c = input.shape()[1];
  s.in_w = input.shape().back();
  s.in_h = input.shape()[input.dim() - 2];
  s.in_d = dims == 3 ? input.shape()[2] : 1;
  s.out_w = g[grid.dim() - 2];
  s.out_h = g[grid.dim() - 3];
  s.out_d = dims == 3 ? g[1] : 1;
  s.mode = static_cast<int>(options.mode);
  s.padding = static_cast<int>(options.padding);
  s.align_corners = options.align_corners;
  return s;
}

Shape sample_out_shape(const SampleShape& s) {
  if (s.dims == 2) return {s.n, s.c, s.out_h, s.out_w};
  return {s.n, s.c, s.out_d, s.out_h, s.out_w};
}

void grid_sample_impl(OpCall& call, const Tensor& out, const Tensor& input, const Tensor& grid,
                      const GridSampleOptions& options) {
  grid_sample_detail::SampleForward p;
  p.s = sample_shape(call, input, grid, options);
  p.out = common::dense_out(call, "out", out, sample_out_shape(p.s), p.s.dtype);
  require_no_overlap(call, "out", out, {{"input", &input}, {"grid", &grid}});
  if (out.numel() == 0) return;
  p.input = common::dense_in(call, input);
  p.grid = common::dense_in(call, grid);
  run_backend(call, p, RUDNN_BACKENDS(grid_sample_detail, sample_forward));
}

void grid_sample_backward_impl(OpCall& call, const Tensor& dinput, const Tensor& dgrid,
                               const Tensor& dout, const Tensor& input, const Tensor& grid,
                               const GridSampleOptions& options) {
  grid_sample_detail::SampleBackward p;
  p.s = sample_shape(call, input, grid, options);
  require_same_dtype(call, "dout", dout, "input", input);
  common::require_shape(call, "dout", dout, sample_out_shape(p.s),
                        "out's shape [N, C, (Do,) Ho, Wo]");
  if (dinput.defined())
    p.dinput = common::dense_out(call, "dinput_out", dinput, input.shape(), p.s.dtype);
  if (dgrid.defined())
    p.dgrid = common::dense_out(call, "dgrid_out", dgrid, grid.shape(), p.s.dtype);
  require_no_overlap(call, "dinput_out", dinput,
                     {{"dout", &dout}, {"input", &input}, {"grid", &grid}, {"dgrid_out", &dgrid}});
  require_no_overlap(call, "dgrid_out", dgrid,
                     {{"dout", &dout}, {"input", &input}, {"grid", &grid}});
  const bool any_dinput = dinput.defined() && dinput.numel() > 0;
  const bool any_dgrid = dgrid.defined() && dgrid.numel() > 0;
  if (!any_dinput && !any_dgrid) return;
  p.dout = common::dense_in(call, dout);
  p.input = common::dense_in(call, input);
  p.grid = common::dense_in(call, grid);
  p.deterministic = options.deterministic && any_dinput && !call.device.is_cpu();
#if RUDNN_WITH_CUDA
  if (p.deterministic) {
    p.scratch = call.keep(call.empty({grid_sample_detail::cuda::deterministic_scratch_bytes(p.s)},
                                     DType::u8))
                    .data();
  }
#endif
  if (any_dinput && !call.device.is_cpu() && p.s.dtype != DType::f32 && !p.deterministic) {
    p.dinput_accumulator =
        static_cast<float*>(call.keep(call.empty({dinput.numel()}, DType::f32)).data());
  }
  if (!any_dinput) p.dinput = nullptr;
  if (!any_dgrid) p.dgrid = nullptr;
  run_backend(call, p, RUDNN_BACKENDS(grid_sample_detail, sample_backward));
}

// The sizes of an affine problem; `values` (theta or dgrid) is checked by the caller.
AffineShape affine_shape(const OpCall& call, const char* values_name, const Tensor& values,
                         const Shape& size, bool align_corners) {
  if (size.size() != 4 && size.size() != 5) {
    fail(ErrorCode::InvalidArgument, cat(call.op, ": size is ", shape_str(size),
                                         "; expected 4 entries {N, C, H, W} or 5 {N, C, D, H, W}"));
  }
  for (int64_t v : size) {
    if (v < 0) {
      fail(ErrorCode::InvalidArgument,
           cat(call.op, ": size is ", shape_str(size), "; expected no negative entry"));
    }
  }
  common::require_float(call, values_name, values);
  AffineShape s;
  s.dtype = values.dtype();
  s.dims = static_cast<int>(size.size()) - 2;
  s.n = size[0];
  s.w = size.back();
  s.h = size[size.size() - 2];
  s.d = s.dims == 3 ? size[2] : 1;
  s.align_corners = align_corners;
  return s;
}

Shape theta_shape(const AffineShape& s) { return {s.n, s.dims, s.dims + 1}; }
Shape affine_grid_shape(const AffineShape& s) {
  if (s.dims == 2) return {s.n, s.h, s.w, 2};
  return {s.n, s.d, s.h, s.w, 3};
}

void affine_grid_impl(OpCall& call, const Tensor& out, const Tensor& theta, const Shape& size,
                      bool align_corners) {
  grid_sample_detail::AffineForward p;
  p.s = affine_shape(call, "theta", theta, size, align_corners);
  common::require_shape(
      call, "theta", theta, theta_shape(p.s),
      p.s.dims == 2 ? "[N, 2, 3] for a 4-entry size" : "[N, 3, 4] for a 5-entry size");
  p.grid = common::dense_out(call, "out", out, affine_grid_shape(p.s), p.s.dtype);
  require_no_overlap(call, "out", out, {{"theta", &theta}});
  if (out.numel() == 0) return;
  p.theta = common::dense_in(call, theta);
  run_backend(call, p, RUDNN_BACKENDS(grid_sample_detail, affine_forward));
}

void affine_grid_backward_impl(OpCall& call, const Tensor& dtheta, const Tensor& dgrid,
                               const Shape& size, bool align_corners) {
  grid_sample_detail::AffineBackward p;
  p.s = affine_shape(call, "dgrid", dgrid, size, align_corners);
  common::require_shape(call, "dgrid", dgrid, affine_grid_shape(p.s), "the grid's shape");
  p.dtheta = common::dense_out(call, "dtheta_out", dtheta, theta_shape(p.s), p.s.dtype);
  require_no_overlap(call, "dtheta_out", dtheta, {{"dgrid", &dgrid}});
  if (dtheta.numel() == 0) return;
  p.dgrid = common::dense_in(call, dgrid);
  run_backend(call, p, RUDNN_BACKENDS(grid_sample_detail, affine_backward));
}

}  // namespace

Tensor grid_sample(const Tensor& input, const Tensor& grid, const GridSampleOptions& options,
                   const Stream& stream) {
  OpCall call("grid_sample", "input", input, stream);
  const SampleShape s = sample_shape(call, input, grid, options);
  Tensor out = call.empty(sample_out_shape(s), s.dtype);
  grid_sample_impl(call, out, input, grid, options);
  return out;
}

void grid_sample_into(const Tensor& out, const Tensor& input, const Tensor& grid,
                      const GridSampleOptions& options, const Stream& stream) {
  OpCall call("grid_sample", "input", input, stream);
  grid_sample_impl(call, out, input, grid, options);
}

GridSampleGrads grid_sample_backward(const Tensor& dout, const Tensor& input, const Tensor& grid,
                                     const GridSampleOptions& options, const Stream& stream) {
  OpCall call("grid_sample_backward", "input", input, stream);
  sample_shape(call, input, grid, options);
  GridSampleGrads g{call.empty(input.shape(), input.dtype()),
                    call.empty(grid.shape(), grid.dtype())};
  grid_sample_backward_impl(call, g.dinput, g.dgrid, dout, input, grid, options);
  return g;
}

void grid_sample_backward_into(const Tensor& dinput_out, const Tensor& dgrid_out,
                               const Tensor& dout, const Tensor& input, const Tensor& grid,
                               const GridSampleOptions& options, const Stream& stream) {
  OpCall call("grid_sample_backward", "input", input, stream);
  grid_sample_backward_impl(call, dinput_out, dgrid_out, dout, input, grid, options);
}

Tensor affine_grid(const Tensor& theta, const Shape& size, bool align_corners,
                   const Stream& stream) {
  OpCall call("affine_grid", "theta", theta, stream);
  const AffineShape s = affine_shape(call, "theta", theta, size, align_corners);
  Tensor out = call.empty(affine_grid_shape(s), s.dtype);
  affine_grid_impl(call, out, theta, size, align_corners);
  return out;
}

void affine_grid_into(const Tensor& out, const Tensor& theta, const Shape& size, bool align_corners,
                      const Stream& stream) {
  OpCall call("affine_grid", "theta", theta, stream);
  affine_grid_impl(call, out, theta, size, align_corners);
}

Tensor affine_grid_backward(const Tensor& dgrid, const Shape& size, bool align_corners,
                            const Stream& stream) {
  OpCall call("affine_grid_backward", "dgrid", dgrid, stream);
  const AffineShape s = affine_shape(call, "dgrid", dgrid, size, align_corners);
  Tensor dtheta = call.empty(theta_shape(s), s.dtype);
  affine_grid_backward_impl(call, dtheta, dgrid, size, align_corners);
  return dtheta;
}

void affine_grid_backward_into(const Tensor& dtheta_out, const Tensor& dgrid, const Shape& size,
                               bool align_corners, const Stream& stream) {
  OpCall call("affine_grid_backward", "dgrid", dgrid, stream);
  affine_grid_backward_impl(call, dtheta_out, dgrid, size, align_corners);
}

}  // namespace rudnn
