#include "rudnn/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/check.h"
#include "core/cuda_api.h"
#include "core/storage.h"
#include "core/strided.h"

namespace rudnn {

using detail::cat;
using detail::check;
using detail::fail;

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t shape_numel(const Shape& shape) {
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0)
      fail(ErrorCode::InvalidArgument,
           cat("shape ", shape_str(shape), " has a negative dimension"));
    empty = empty || d == 0;
  }
  if (empty) return 0;  // whatever the other dimensions, in any order
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) {
      fail(ErrorCode::InvalidArgument,
           cat("shape ", shape_str(shape), " has more than 2^63 elements"));
    }
  }
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

Tensor Tensor::make(std::shared_ptr<detail::Storage> storage, const Shape& shape,
                    const Shape& strides, int64_t offset, DType dtype) {
  check(shape.size() == strides.size(), ErrorCode::InvalidArgument, "Tensor: shape ",
        shape_str(shape), " and strides ", shape_str(strides), " differ in rank");
  const int64_t numel = shape_numel(shape);
  check(offset >= 0, ErrorCode::InvalidArgument, "Tensor: negative offset ", offset);
  if (numel > 0) {
    // The largest element index the view can reach must lie inside the storage.
    int64_t last = offset;
    for (size_t i = 0; i < shape.size(); ++i) {
      check(strides[i] >= 0, ErrorCode::InvalidArgument, "Tensor: negative stride in ",
            shape_str(strides));
      int64_t span = 0;
      if (__builtin_mul_overflow(shape[i] - 1, strides[i], &span) ||
          __builtin_add_overflow(last, span, &last)) {
        fail(ErrorCode::InvalidArgument, cat("Tensor: view ", shape_str(shape), " with strides ",
                                             shape_str(strides), " overflows int64"));
      }
    }
    const auto item = static_cast<int64_t>(dtype_size(dtype));
    int64_t end_bytes = 0;
    if (__builtin_mul_overflow(last + 1, item, &end_bytes) ||
        static_cast<uint64_t>(end_bytes) > storage->bytes) {
      fail(ErrorCode::InvalidArgument,
           cat("Tensor: view ", shape_str(shape), " with strides ", shape_str(strides),
               " at offset ", offset, " reaches past its storage of ", storage->bytes, " bytes"));
    }
  }
  Tensor t;
  t.storage_ = std::move(storage);
  t.shape_ = shape;
  t.strides_ = strides;
  t.offset_ = offset;
  t.numel_ = numel;
  t.dtype_ = dtype;
  return t;
}

// ---- Factories --------------------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, const Stream& stream) {
  detail::cuda::require_device(device, "Tensor::empty");
  const int64_t numel = shape_numel(shape);
  size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel), dtype_size(dtype), &bytes)) {
    fail(ErrorCode::InvalidArgument,
         cat("Tensor::empty: ", shape_str(shape), " of ", dtype_name(dtype), " overflows"));
  }
  const Stream s = resolve_stream(stream, device, "Tensor::empty");
  return make(detail::allocate_storage(bytes, device, s), shape, contiguous_strides(shape), 0,
              dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device, const Stream& stream) {
  Tensor t = empty(shape, dtype, device, stream);
  if (device.is_cpu()) {
    if (t.storage_->bytes) std::memset(t.storage_->data, 0, t.storage_->bytes);
  } else {
    detail::cuda::memset_async(t.storage_->data, 0, t.storage_->bytes, device,
                               resolve_stream(stream, device, "Tensor::zeros").handle());
  }
  return t;
}

namespace {

// `value` rounded to a float with round-to-odd: exact when representable, else the
// neighbour toward zero with its last mantissa bit set. Rounding that float to f16 / bf16
// (ties to even) gives the correctly rounded `value`, since float carries at least two more
// bits than either; going through a round-to-nearest float would round twice.
float round_to_odd_float(double value) {
  float f = static_cast<float>(value);
  if (!std::isfinite(value) || static_cast<double>(f) == value) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(value)) f = std::nextafter(f, 0.0f);
  return detail::bits_float(detail::float_bits(f) | 1u);
}

uint64_t element_bits(double value, DType dtype) {
  switch (dtype) {
    case DType::f32:
      return detail::float_bits(static_cast<float>(value));
    case DType::f16:
      return half(round_to_odd_float(value)).bits;
    case DType::bf16:
      return bfloat16(round_to_odd_float(value)).bits;
    case DType::f64: {
      uint64_t u;
      std::memcpy(&u, &value, sizeof u);
      return u;
    }
    case DType::i32:
      return static_cast<uint32_t>(static_cast<int32_t>(value));
    case DType::i64:
      return static_cast<uint64_t>(static_cast<int64_t>(value));
    case DType::u32:
      return static_cast<uint32_t>(value);
    case DType::u8:
      return static_cast<uint8_t>(value);
    case DType::boolean:
      return value != 0.0 ? 1u : 0u;
  }
  return 0;
}

}  // namespace

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device,
                    const Stream& stream) {
  Tensor t = empty(shape, dtype, device, stream);
  const uint64_t bits = element_bits(value, dtype);
  const size_t item = dtype_size(dtype);
  if (device.is_cpu()) {
    auto* p = static_cast<unsigned char*>(t.storage_->data);
    for (int64_t i = 0; i < t.numel_; ++i)
      std::memcpy(p + i * item, &bits, item);  // little-endian low bytes
  } else {
    detail::cuda::fill_pattern(t.storage_->data, t.numel_, item, bits, device,
                               resolve_stream(stream, device, "Tensor::full").handle());
  }
  return t;
}

Tensor Tensor::from_host(const void* data, const Shape& shape, DType dtype, Device device,
                         const Stream& stream) {
  Tensor t = empty(shape, dtype, device, stream);
  const size_t bytes = t.storage_->bytes;
  if (bytes == 0) return t;
  check(data != nullptr, ErrorCode::InvalidArgument, "Tensor::from_host: data is null");
  if (device.is_cpu()) {
    std::memcpy(t.storage_->data, data, bytes);
  } else {
    detail::cuda::copy_to_device(t.storage_->data, data, bytes, device,
                                 resolve_stream(stream, device, "Tensor::from_host").handle());
  }
  return t;
}

Tensor Tensor::from_blob(void* data, size_t storage_bytes, const Shape& shape, const Shape& strides,
                         int64_t offset, DType dtype, Device device,
                         std::function<void()> release) {
  // The storage owns `release` from here on, so it also runs when a check below throws.
  auto storage = std::make_shared<detail::Storage>();
  storage->data = data;
  storage->bytes = storage_bytes;
  storage->device = device;
  storage->release = std::move(release);
  detail::cuda::require_device(device, "Tensor::from_blob");
  check(data != nullptr || storage_bytes == 0, ErrorCode::InvalidArgument,
        "Tensor::from_blob: data is null");
  return make(std::move(storage), shape, strides, offset, dtype);
}

// ---- Properties -------------------------------------------------------------------------

int64_t Tensor::size(int64_t d) const {
  const int64_t n = dim();
  const int64_t i = d < 0 ? d + n : d;
  check(i >= 0 && i < n, ErrorCode::InvalidArgument, "Tensor::size: dimension ", d,
        " out of range for a ", n, "-d tensor");
  return shape_[static_cast<size_t>(i)];
}

Device Tensor::device() const { return storage_ ? storage_->device : Device::cpu(); }

bool Tensor::is_contiguous() const noexcept {
  // No elements: nothing to lay out (contiguous_strides gives a 0-size dimension stride 1,
  // which the products below would not match).
  if (numel_ == 0) return true;
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::data() const {
  check(defined(), ErrorCode::InvalidArgument, "Tensor::data: undefined tensor");
  if (storage_->data == nullptr) return nullptr;
  return static_cast<unsigned char*>(storage_->data) + offset_ * static_cast<int64_t>(itemsize());
}

const void* Tensor::storage_data() const { return storage_ ? storage_->data : nullptr; }
size_t Tensor::storage_bytes() const { return storage_ ? storage_->bytes : 0; }

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  return cat("Tensor(", dtype_name(dtype_), ", ", shape_str(shape_), ", ", device().str(), ")");
}

Stream Tensor::allocation_stream() const {
  return storage_ ? storage_->allocation_stream : Stream();
}

// ---- Views --------------------------------------------------------------------------------

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides, int64_t offset) const {
  check(defined(), ErrorCode::InvalidArgument, "Tensor::as_strided: undefined tensor");
  return make(storage_, shape, strides, offset, dtype_);
}

Tensor Tensor::view(const Shape& shape) const {
  check(defined(), ErrorCode::InvalidArgument, "Tensor::view: undefined tensor");
  check(is_contiguous(), ErrorCode::InvalidArgument,
        "Tensor::view: needs a contiguous tensor, got strides ", shape_str(strides_), " for shape ",
        shape_str(shape_));
  Shape resolved = shape;
  int64_t known = 1;
  int inferred = -1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      check(inferred < 0, ErrorCode::InvalidArgument, "Tensor::view: more than one -1 in ",
            shape_str(shape));
      inferred = static_cast<int>(i);
    } else {
      check(resolved[i] >= 0, ErrorCode::InvalidArgument, "Tensor::view: negative dimension in ",
            shape_str(shape));
      known *= resolved[i];
    }
  }
  if (inferred >= 0) {
    check(known > 0 && numel_ % known == 0, ErrorCode::ShapeMismatch, "Tensor::view: cannot view ",
          shape_str(shape_), " as ", shape_str(shape));
    resolved[static_cast<size_t>(inferred)] = numel_ / known;
  }
  check(shape_numel(resolved) == numel_, ErrorCode::ShapeMismatch, "Tensor::view: cannot view ",
        shape_str(shape_), " (", numel_, " elements) as ", shape_str(shape));
  return make(storage_, resolved, contiguous_strides(resolved), offset_, dtype_);
}

Tensor Tensor::slice(int64_t dim_, int64_t start, int64_t stop, int64_t step) const {
  check(defined(), ErrorCode::InvalidArgument, "Tensor::slice: undefined tensor");
  const int64_t n = dim();
  const int64_t d = dim_ < 0 ? dim_ + n : dim_;
  check(d >= 0 && d < n, ErrorCode::InvalidArgument, "Tensor::slice: dimension ", dim_,
        " out of range for a ", n, "-d tensor");
  check(step > 0, ErrorCode::InvalidArgument, "Tensor::slice: step must be positive, got ", step);
  const int64_t size = shape_[static_cast<size_t>(d)];
  auto clamp = [size](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + size : i, 0, size); };
  const int64_t b = clamp(start), e = std::max(clamp(stop), clamp(start));
  Shape shape = shape_, strides = strides_;
  shape[static_cast<size_t>(d)] = (e - b + step - 1) / step;
  strides[static_cast<size_t>(d)] = strides_[static_cast<size_t>(d)] * step;
  const int64_t offset =
      offset_ + (shape[static_cast<size_t>(d)] > 0 ? b * strides_[static_cast<size_t>(d)] : 0);
  return make(storage_, shape, strides, offset, dtype_);
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  check(defined(), ErrorCode::InvalidArgument, "Tensor::transpose: undefined tensor");
  const int64_t n = dim();
  const int64_t a = dim0 < 0 ? dim0 + n : dim0, b = dim1 < 0 ? dim1 + n : dim1;
  check(a >= 0 && a < n && b >= 0 && b < n, ErrorCode::InvalidArgument,
        "Tensor::transpose: dimensions ", dim0, ", ", dim1, " out of range for a ", n, "-d tensor");
  Shape shape = shape_, strides = strides_;
  std::swap(shape[static_cast<size_t>(a)], shape[static_cast<size_t>(b)]);
  std::swap(strides[static_cast<size_t>(a)], strides[static_cast<size_t>(b)]);
  return make(storage_, shape, strides, offset_, dtype_);
}

// ---- Copies ---------------------------------------------------------------------------------

Tensor Tensor::contiguous(const Stream& stream) const {
  check(defined(), ErrorCode::InvalidArgument, "Tensor::contiguous: undefined tensor");
  if (is_contiguous()) return *this;
  return to(device(), stream);
}

Tensor Tensor::to(Device target, const Stream& stream) const {
  check(defined(), ErrorCode::InvalidArgument, "Tensor::to: undefined tensor");
  // A CUDA stream orders the CUDA side of the copy; the host side has no queue.
  const Stream alloc_stream = target.is_cuda() ? stream : Stream();
  Tensor out = empty(shape_, dtype_, target, alloc_stream);
  out.copy_from(*this, stream);
  return out;
}

Tensor Tensor::to_host(const Stream& stream) const { return to(Device::cpu(), stream); }

void Tensor::copy_from(const Tensor& src, const Stream& stream) const {
  check(defined() && src.defined(), ErrorCode::InvalidArgument,
        "Tensor::copy_from: undefined tensor");
  if (src.shape_ != shape_) {
    fail(ErrorCode::ShapeMismatch, cat("Tensor::copy_from: source shape ", shape_str(src.shape_),
                                       " differs from ", shape_str(shape_)));
  }
  check(src.dtype_ == dtype_, ErrorCode::DTypeMismatch, "Tensor::copy_from: source is ",
        dtype_name(src.dtype_), ", destination ", dtype_name(dtype_));
  if (numel_ == 0) return;
  const Device dst_dev = device(), src_dev = src.device();
  const size_t item = itemsize();
  const size_t bytes = static_cast<size_t>(numel_) * item;

  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    detail::host_strided_copy(data(), strides_, src.data(), src.strides_, shape_, item);
    return;
  }
  if (dst_dev.is_cpu()) {  // device -> host
    const Stream s = resolve_stream(stream, src_dev, "Tensor::copy_from");
    const Tensor dense = src.contiguous(s);
    if (is_contiguous()) {
      detail::cuda::copy_to_host(data(), dense.data(), bytes, src_dev, s.handle());
    } else {
      Tensor staging = empty(shape_, dtype_, Device::cpu());
      detail::cuda::copy_to_host(staging.data(), dense.data(), bytes, src_dev, s.handle());
      detail::host_strided_copy(data(), strides_, staging.data(), staging.strides_, shape_, item);
    }
    return;
  }
  const Stream s = resolve_stream(stream, dst_dev, "Tensor::copy_from");
  if (src_dev.is_cpu()) {  // host -> device
    const Tensor dense = src.contiguous();
    if (is_contiguous()) {
      detail::cuda::copy_to_device(data(), dense.data(), bytes, dst_dev, s.handle());
    } else {
      Tensor staging = empty(shape_, dtype_, dst_dev, s);
      detail::cuda::copy_to_device(staging.data(), dense.data(), bytes, dst_dev, s.handle());
      copy_from(staging, s);
    }
    return;
  }
  if (src_dev != dst_dev) {  // device -> other device: through a dense buffer on each side
    const Stream src_stream = current_stream(src_dev);
    const Tensor dense = src.contiguous(src_stream);
    src_stream.synchronize();  // the peer copy runs on the destination's stream
    const Tensor target = is_contiguous() ? *this : empty(shape_, dtype_, dst_dev, s);
    detail::cuda::copy_peer(target.data(), dst_dev, dense.data(), src_dev, bytes, s.handle());
    if (!is_contiguous()) copy_from(target, s);
    return;
  }
  if (is_contiguous() && src.is_contiguous()) {
    detail::cuda::copy_device_to_device(data(), src.data(), bytes, dst_dev, s.handle());
    return;
  }
  const detail::CollapsedLayout layout = detail::collapse_for_copy(shape_, strides_, src.strides_);
  detail::cuda::strided_copy(data(), layout.dst_strides.data(), src.data(),
                             layout.src_strides.data(), layout.shape.data(),
                             static_cast<int>(layout.shape.size()), item, dst_dev, s.handle());
}

}  // namespace rudnn
