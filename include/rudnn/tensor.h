// Tensor: a strided view of reference-counted storage on the CPU or a CUDA device.
//
// A Tensor is a cheap handle (copying it copies the view, not the data); `const Tensor&`
// means the handle is not reseated, not that the elements are read-only. Shapes and
// strides are in elements, strides may be any non-negative values (views produced by
// slice/transpose/as_strided), and `offset` is the first element's index into the storage.
//
// Device storage comes from ruDNN's stream-ordered caching allocator (allocator.h): it is
// allocated on a stream, is ready for work queued on that stream, and is returned to the
// pool on that same stream when the last handle goes. Using a tensor on another stream
// needs the caller's own ordering (an event), as with any stream-ordered allocator.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rudnn/device.h"
#include "rudnn/dtype.h"
#include "rudnn/error.h"
#include "rudnn/stream.h"

namespace rudnn {

using Shape = std::vector<int64_t>;

// "[2, 3, 4]".
std::string shape_str(const Shape& shape);

// Product of the dimensions (1 for the empty shape of a 0-d tensor). Throws
// InvalidArgument for negative dimensions or products that overflow int64.
int64_t shape_numel(const Shape& shape);

namespace detail {
struct Storage;
}

class Tensor {
 public:
  // An undefined tensor: defined() is false. Ops take it for "no tensor" (e.g. no gamma).
  Tensor() = default;

  // ---- Factories. `stream` orders the allocation (and, for from_host/full/zeros, the
  // initialisation) on a CUDA device; the default is current_stream(device).

  // Uninitialised contiguous tensor.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu(),
                      const Stream& stream = {});
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu(),
                      const Stream& stream = {});
  // Every element `value` converted to `dtype` (rounded to nearest even for f16/bf16).
  static Tensor full(const Shape& shape, double value, DType dtype, Device device = Device::cpu(),
                     const Stream& stream = {});
  // Copies numel(shape) * dtype_size(dtype) bytes from host memory `data` (row-major).
  // A copy to a CUDA device has finished reading `data` when this returns.
  static Tensor from_host(const void* data, const Shape& shape, DType dtype,
                          Device device = Device::cpu(), const Stream& stream = {});
  template <class T>
  static Tensor from_host(const std::vector<T>& data, const Shape& shape,
                          Device device = Device::cpu(), const Stream& stream = {}) {
    if (static_cast<int64_t>(data.size()) != shape_numel(shape)) {
      throw Error(ErrorCode::ShapeMismatch, "Tensor::from_host: " + std::to_string(data.size()) +
                                                " elements given for shape " + shape_str(shape));
    }
    return from_host(data.data(), shape, dtype_of<T>(), device, stream);
  }
  // Wraps memory the caller owns, without copying. `release` (may be empty) runs when the
  // last handle goes, or before this throws. `storage_bytes` bounds every view taken of it.
  static Tensor from_blob(void* data, size_t storage_bytes, const Shape& shape,
                          const Shape& strides, int64_t offset, DType dtype, Device device,
                          std::function<void()> release = {});

  // ---- Properties.
  bool defined() const noexcept { return storage_ != nullptr; }
  const Shape& shape() const noexcept { return shape_; }
  const Shape& strides() const noexcept { return strides_; }
  int64_t offset() const noexcept { return offset_; }
  int64_t dim() const noexcept { return static_cast<int64_t>(shape_.size()); }
  // Size of dimension `d`; negative `d` counts from the end.
  int64_t size(int64_t d) const;
  int64_t numel() const noexcept { return numel_; }
  DType dtype() const noexcept { return dtype_; }
  size_t itemsize() const noexcept { return dtype_size(dtype_); }
  Device device() const;
  // Row-major dense: strides are the products of the trailing sizes (size-1 dims ignored;
  // a tensor with no elements counts as contiguous).
  bool is_contiguous() const noexcept;
  // Address of element [0, ..., 0].
  void* data() const;
  template <class T>
  T* data_as() const {
    if (dtype_of<T>() != dtype_) {
      throw Error(ErrorCode::DTypeMismatch, std::string("Tensor::data_as: tensor is ") +
                                                dtype_name(dtype_) + ", asked for " +
                                                dtype_name(dtype_of<T>()));
    }
    return static_cast<T*>(data());
  }
  // The storage's base address and size: two tensors overlap only if these ranges do.
  const void* storage_data() const;
  size_t storage_bytes() const;
  // How many Tensor handles (views included) share this tensor's storage; 0 when undefined.
  // Ops that update a cache copy it first when another handle could see the write (1: this
  // handle alone). Memory wrapped with from_blob counts only ruDNN's handles.
  long storage_handles() const noexcept { return storage_.use_count(); }
  // "Tensor(bf16, [2, 3], cuda:0)".
  std::string str() const;

  // ---- Views (share storage; bounds-checked against it).
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;
  // Same elements, new shape; needs a contiguous tensor. One dimension may be -1.
  Tensor view(const Shape& shape) const;
  // Elements start, start+step, ... < stop along `dim` (negative dim/start/stop count from
  // the end; start/stop are clamped to the dimension as in Python).
  Tensor slice(int64_t dim, int64_t start, int64_t stop, int64_t step = 1) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;

  // ---- Copies (never host fallbacks of device work: device-to-device copies run on the
  // device, ordered on `stream`).
  // *this when already contiguous, else a contiguous copy on the same device.
  Tensor contiguous(const Stream& stream = {}) const;
  // A new contiguous copy on `device` (also when already there).
  Tensor to(Device device, const Stream& stream = {}) const;
  // to(Device::cpu()); waits for the device copy to finish.
  Tensor to_host(const Stream& stream = {}) const;
  // Copies `src` (same shape and dtype; any device and strides) into *this.
  void copy_from(const Tensor& src, const Stream& stream = {}) const;
  // All elements in row-major order, read back to the host (waits for the copy).
  template <class T>
  std::vector<T> to_vector(const Stream& stream = {}) const {
    Tensor host = to_host(stream);
    const T* p = host.data_as<T>();
    return std::vector<T>(p, p + numel_);
  }

  // The stream the storage was allocated on (the default Stream for host memory and
  // memory wrapped by from_blob / from_dlpack).
  Stream allocation_stream() const;

 private:
  std::shared_ptr<detail::Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;
  int64_t numel_ = 0;
  DType dtype_ = DType::f32;

  friend struct detail::Storage;
  static Tensor make(std::shared_ptr<detail::Storage> storage, const Shape& shape,
                     const Shape& strides, int64_t offset, DType dtype);
};

// Contiguous (row-major) strides for `shape`.
Shape contiguous_strides(const Shape& shape);

}  // namespace rudnn
