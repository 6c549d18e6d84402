// Problem-side views of tensors: what a validated problem struct holds instead of Tensors.
// Every view is valid for its described extent; the element type is the problem's dtype.
//
// Inputs of any layout are taken: a view reads the tensor in place when its layout fits the
// view, else a dense copy made on the call's stream (one extra pass, kept alive by the
// OpCall). Outputs must fit as they are: an output is never written through a copy.
#pragma once

#include <cstdint>

#include "common/op_call.h"
#include "rudnn/tensor.h"

namespace rudnn::common {

// Rows of the last axis: element (r, c) at data + r * stride + c; c < cols is dense.
struct RowsIn {
  const void* data = nullptr;
  int64_t stride = 0;
};
struct RowsOut {
  void* data = nullptr;
  int64_t stride = 0;
};

// The row count and length of a row problem (`[..., H]` seen as rows x H) and its dtype.
struct RowShape {
  int64_t rows = 0, cols = 0;
  DType dtype = DType::f32;
};
// rows x cols of a tensor with a non-empty last axis (validated by the caller).
RowShape row_shape(const Tensor& t);

// `t.shape()[:-1]`.
Shape leading_shape(const Tensor& t);

// Rows of an input, in place when the last axis is dense and the leading axes collapse to
// one stride, else of a dense copy.
RowsIn rows_in(OpCall& call, const Tensor& t);
// A row output of the given shape and dtype: a dense last axis and one row stride, rows
// that do not overlap each other; anything else is refused.
RowsOut rows_out(const OpCall& call, const char* name, const Tensor& out, const Shape& shape,
                 DType dtype);

// A dense (contiguous) input: the tensor itself or a dense copy.
const void* dense_in(OpCall& call, const Tensor& t);
// A contiguous output of the given shape and dtype; anything else is refused.
void* dense_out(const OpCall& call, const char* name, const Tensor& out, const Shape& shape,
                DType dtype);

// A 4-d view with named axes [batch, seq, heads, dim] (the order of a [B, L, H, D] tensor)
// and a dense last axis: element (b, s, h, d) at data + b*batch_stride + s*seq_stride +
// h*head_stride + d. The same view describes a [B, H, L, D] tensor (its strides swapped) and
// packed varlen [total, H, D] (batch 1), so attention, paged attention and the gated delta
// rule address queries, keys and states through one type.
struct BshdShape {
  int64_t batch = 0, seq = 0, heads = 0, dim = 0;
};
struct BshdIn {
  const void* data = nullptr;
  BshdShape shape;
  int64_t batch_stride = 0, seq_stride = 0, head_stride = 0;
};
struct BshdOut {
  void* data = nullptr;
  BshdShape shape;
  int64_t batch_stride = 0, seq_stride = 0, head_stride = 0;
};

// Which axis of a 4-d tensor holds what.
enum class Axes4 {
  bshd,  // [batch, seq, heads, dim]
  bhsd,  // [batch, heads, seq, dim]
};

// A 4-d input in the given axis order (3-d [seq, heads, dim] is taken as batch 1), read in
// place when its last axis is dense, else from a dense copy.
BshdIn bshd_in(OpCall& call, const char* name, const Tensor& t, Axes4 axes);
// A 4-d output (or 3-d, batch 1) with a dense last axis whose (batch, seq, head) positions
// do not overlap; anything else is refused.
BshdOut bshd_out(const OpCall& call, const char* name, const Tensor& out, Axes4 axes);

}  // namespace rudnn::common
