#include "common/views.h"

#include <algorithm>
#include <array>

#include "core/strided.h"

namespace rudnn::common {

using detail::cat;
using detail::fail;

RowShape row_shape(const Tensor& t) {
  RowShape s;
  s.cols = t.shape().back();
  s.rows = s.cols == 0 ? 0 : t.numel() / s.cols;
  s.dtype = t.dtype();
  return s;
}

Shape leading_shape(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 1); }

RowsIn rows_in(OpCall& call, const Tensor& t) {
  if (const auto layout = detail::row_layout(t)) return RowsIn{t.data(), layout->row_stride};
  const Tensor& dense = call.keep(t.contiguous(call.stream));
  return RowsIn{dense.data(), detail::row_layout(dense)->row_stride};
}

RowsOut rows_out(const OpCall& call, const char* name, const Tensor& out, const Shape& shape,
                 DType dtype) {
  require_out(call, name, out, shape, dtype);
  const auto layout = detail::row_layout(out);
  if (!layout || (layout->rows > 1 && layout->row_stride < layout->cols)) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": ", name, " has strides ", shape_str(out.strides()),
             "; an output needs a dense last axis and one row stride"));
  }
  return RowsOut{out.data(), layout->row_stride};
}

const void* dense_in(OpCall& call, const Tensor& t) {
  if (t.is_contiguous()) return t.data();
  return call.keep(t.contiguous(call.stream)).data();
}

void* dense_out(const OpCall& call, const char* name, const Tensor& out, const Shape& shape,
                DType dtype) {
  require_out(call, name, out, shape, dtype);
  if (!out.is_contiguous()) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": ", name, " must be contiguous, has strides ", shape_str(out.strides())));
  }
  return out.data();
}

namespace {

// (shape, strides) of a 3-d or 4-d tensor in [batch, seq, heads, dim] order.
struct Bshd {
  BshdShape shape;
  int64_t batch_stride = 0, seq_stride = 0, head_stride = 0, dim_stride = 0;
};

Bshd named_axes(const OpCall& call, const char* name, const Tensor& t, Axes4 axes) {
  require_defined(call, name, t);
  if (t.dim() != 3 && t.dim() != 4) {
    fail(ErrorCode::ShapeMismatch,
         cat(call.op, ": ", name, " has shape ", shape_str(t.shape()),
             axes == Axes4::bshd ? "; expected [B, L, H, D] or packed [total, H, D]"
                                 : "; expected [B, H, L, D] or packed [total, H, D]"));
  }
  const Shape& n = t.shape();
  const Shape& s = t.strides();
  Bshd v;
  const int o = t.dim() == 4 ? 1 : 0;  // packed 3-d tensors are [seq, heads, dim] with batch 1
  if (o == 1) {
    v.shape.batch = n[0];
    v.batch_stride = s[0];
  } else {
    v.shape.batch = 1;
  }
  const bool seq_first = o == 0 || axes == Axes4::bshd;
  const int seq_axis = seq_first ? o : o + 1, head_axis = seq_first ? o + 1 : o;
  v.shape.seq = n[seq_axis];
  v.seq_stride = s[seq_axis];
  v.shape.heads = n[head_axis];
  v.head_stride = s[head_axis];
  v.shape.dim = n[o + 2];
  v.dim_stride = s[o + 2];
  return v;
}

// Whether the (batch, seq, head) rows of a view with a dense last axis are disjoint: sorted
// by stride, each axis steps past everything the smaller ones span.
bool rows_disjoint(const Bshd& v) {
  std::array<std::pair<int64_t, int64_t>, 3> axes{{{v.batch_stride, v.shape.batch},
                                                   {v.seq_stride, v.shape.seq},
                                                   {v.head_stride, v.shape.heads}}};
  std::sort(axes.begin(), axes.end());
  int64_t span = v.shape.dim;
  for (const auto& [stride, size] : axes) {
    if (size <= 1) continue;
    if (stride < span) return false;
    span = stride * (size - 1) + span;
  }
  return true;
}

}  // namespace

BshdIn bshd_in(OpCall& call, const char* name, const Tensor& t, Axes4 axes) {
  Bshd v = named_axes(call, name, t, axes);
  const void* data = t.data();
  if (v.dim_stride != 1 && v.shape.dim > 1) {
    const Tensor& dense = call.keep(t.contiguous(call.stream));
    v = named_axes(call, name, dense, axes);
    data = dense.data();
  }
  return BshdIn{data, v.shape, v.batch_stride, v.seq_stride, v.head_stride};
}

BshdOut bshd_out(const OpCall& call, const char* name, const Tensor& out, Axes4 axes) {
  const Bshd v = named_axes(call, name, out, axes);
  require_device(call, name, out);
  if ((v.dim_stride != 1 && v.shape.dim > 1) || !rows_disjoint(v)) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": ", name, " has strides ", shape_str(out.strides()),
             "; an output needs a dense last axis and rows that do not overlap"));
  }
  return BshdOut{out.data(), v.shape, v.batch_stride, v.seq_stride, v.head_stride};
}

}  // namespace rudnn::common
