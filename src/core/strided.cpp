#include "core/strided.h"

#include <cstring>
#include <utility>

namespace rudnn::detail {

CollapsedLayout collapse_for_copy(const Shape& shape, const Shape& dst_strides,
                                  const Shape& src_strides) {
  CollapsedLayout out;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!out.shape.empty() && out.dst_strides.back() == dst_strides[i] * shape[i] &&
        out.src_strides.back() == src_strides[i] * shape[i]) {
      // Dimension i continues the previous one in both layouts: merge.
      out.shape.back() *= shape[i];
      out.dst_strides.back() = dst_strides[i];
      out.src_strides.back() = src_strides[i];
      continue;
    }
    out.shape.push_back(shape[i]);
    out.dst_strides.push_back(dst_strides[i]);
    out.src_strides.push_back(src_strides[i]);
  }
  if (out.shape.empty()) out = CollapsedLayout{{1}, {1}, {1}};
  return out;
}

void host_strided_copy(void* dst, const Shape& dst_strides, const void* src,
                       const Shape& src_strides, const Shape& shape, size_t element_size) {
  const CollapsedLayout layout = collapse_for_copy(shape, dst_strides, src_strides);
  const size_t dims = layout.shape.size();
  int64_t count = 1;
  for (int64_t s : layout.shape) count *= s;
  if (count == 0) return;
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  const auto item = static_cast<int64_t>(element_size);
  if (dims == 1 && layout.dst_strides[0] == 1 && layout.src_strides[0] == 1) {
    std::memcpy(d, s, static_cast<size_t>(count) * element_size);
    return;
  }
  Shape index(dims, 0);
  int64_t dst_offset = 0, src_offset = 0;
  for (int64_t n = 0; n < count; ++n) {
    std::memcpy(d + dst_offset * item, s + src_offset * item, element_size);
    // Odometer increment of the multi-index, updating both offsets incrementally.
    for (size_t k = dims; k-- > 0;) {
      if (++index[k] < layout.shape[k]) {
        dst_offset += layout.dst_strides[k];
        src_offset += layout.src_strides[k];
        break;
      }
      dst_offset -= (layout.shape[k] - 1) * layout.dst_strides[k];
      src_offset -= (layout.shape[k] - 1) * layout.src_strides[k];
      index[k] = 0;
    }
  }
}

std::optional<RowLayout> row_layout(const Tensor& t) {
  const int64_t n = t.dim();
  if (n == 0) return std::nullopt;
  RowLayout layout;
  layout.cols = t.shape().back();
  if (layout.cols != 1 && t.strides().back() != 1) return std::nullopt;
  layout.rows = 1;
  // The leading axes collapse to one stride when each axis of size > 1 steps by the stride
  // times the size of the next such axis inwards; size-1 axes constrain nothing.
  int64_t row_stride = -1, expected = 0;
  for (int64_t i = n - 2; i >= 0; --i) {
    const int64_t size = t.shape()[static_cast<size_t>(i)];
    layout.rows *= size;
    if (size == 1) continue;
    const int64_t s = t.strides()[static_cast<size_t>(i)];
    if (row_stride < 0) {
      row_stride = s;
    } else if (s != expected) {
      return std::nullopt;
    }
    expected = s * size;
  }
  layout.row_stride = row_stride < 0 ? layout.cols : row_stride;
  return layout;
}

namespace {

// [first, last) byte addresses a view can touch.
std::pair<uintptr_t, uintptr_t> byte_span(const Tensor& t) {
  int64_t last = 0;
  for (int64_t i = 0; i < t.dim(); ++i)
    last += (t.shape()[static_cast<size_t>(i)] - 1) * t.strides()[static_cast<size_t>(i)];
  const auto first = reinterpret_cast<uintptr_t>(t.data());
  return {first, first + static_cast<uintptr_t>(last + 1) * t.itemsize()};
}

}  // namespace

bool may_overlap(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.numel() == 0 || b.numel() == 0) return false;
  if (a.device() != b.device()) return false;
  const auto [a0, a1] = byte_span(a);
  const auto [b0, b1] = byte_span(b);
  return a0 < b1 && b0 < a1;
}

}  // namespace rudnn::detail
