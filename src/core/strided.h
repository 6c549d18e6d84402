// Host-side layout helpers shared by the core and the op families.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "rudnn/tensor.h"

namespace rudnn::detail {

// A copy's shape with size-1 dimensions dropped and adjacent dimensions merged wherever
// both sides allow it (at least one dimension).
struct CollapsedLayout {
  Shape shape, dst_strides, src_strides;
};
CollapsedLayout collapse_for_copy(const Shape& shape, const Shape& dst_strides,
                                  const Shape& src_strides);

// Element-by-element strided copy between host buffers.
void host_strided_copy(void* dst, const Shape& dst_strides, const void* src,
                       const Shape& src_strides, const Shape& shape, size_t element_size);

// A tensor seen as `rows` rows of its last axis, row r starting at element r * row_stride
// from data(), elements within a row dense. Present when the last axis has stride 1 (or
// size 1) and the leading axes collapse to a single stride.
struct RowLayout {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;
};
std::optional<RowLayout> row_layout(const Tensor& t);

// Whether the memory spans of two views intersect (conservative: interleaved views whose
// spans cross count as overlapping). Empty tensors overlap nothing.
bool may_overlap(const Tensor& a, const Tensor& b);

}  // namespace rudnn::detail
