// Helpers of the GEMM tests: operands on the host (rounded to their dtype) and the device,
// and the float64 reference product.
#pragma once

#include <cstdint>
#include <vector>

#include "gemm/gemm.h"
#include "support/test_support.h"

namespace rudnn::test::gemm_support {

using rudnn::gemm::Layout;

// A logical rows x cols matrix stored in `layout` (ld = the contiguous extent), with the
// values as the device sees them (already rounded to dtype).
struct Matrix {
  int64_t rows = 0, cols = 0;
  Layout layout = Layout::RowMajor;
  std::vector<double> values;  // storage order
  Tensor device;
  int64_t ld() const {
    const int64_t contiguous = layout == Layout::RowMajor ? cols : rows;
    return contiguous > 0 ? contiguous : 1;
  }
  double at(int64_t r, int64_t c) const {
    return layout == Layout::RowMajor ? values[r * cols + c] : values[c * rows + r];
  }
  gemm::Operand operand() const { return gemm::Operand{device.data(), layout, ld()}; }
};

inline Matrix random_matrix(Rng& rng, int64_t rows, int64_t cols, Layout layout, DType dtype) {
  Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.layout = layout;
  const Shape shape = layout == Layout::RowMajor ? Shape{rows, cols} : Shape{cols, rows};
  const Tensor host = random_tensor(rng, shape, dtype);
  m.values = to_doubles(host);
  m.device = host.to(Device::cuda(0));
  return m;
}

}  // namespace rudnn::test::gemm_support
