#include "rudnn/dlpack.h"

#include <dlpack/dlpack.h>

#include <memory>
#include <vector>

#include "core/check.h"

namespace rudnn {

namespace {

using detail::cat;
using detail::fail;

// kDLBool arrived in DLPack 0.8; Debian's 0.6 header lacks the name, producers send it.
constexpr uint8_t kBoolCode = 6;

DType dtype_from_dlpack(DLDataType t) {
  if (t.lanes != 1)
    fail(ErrorCode::Unsupported,
         cat("from_dlpack: vector dtypes (", int(t.lanes), " lanes) are not supported"));
  switch (t.code) {
    case kDLFloat:
      if (t.bits == 32) return DType::f32;
      if (t.bits == 16) return DType::f16;
      if (t.bits == 64) return DType::f64;
      break;
    case kDLBfloat:
      if (t.bits == 16) return DType::bf16;
      break;
    case kDLInt:
      if (t.bits == 32) return DType::i32;
      if (t.bits == 64) return DType::i64;
      break;
    case kDLUInt:
      if (t.bits == 8) return DType::u8;
      if (t.bits == 32) return DType::u32;
      break;
    case kBoolCode:
      if (t.bits == 8) return DType::boolean;
      break;
    default:
      break;
  }
  fail(ErrorCode::Unsupported, cat("from_dlpack: dtype code ", int(t.code), " with ", int(t.bits),
                                   " bits is not supported"));
}

DLDataType dtype_to_dlpack(DType d) {
  switch (d) {
    case DType::f32:
      return {kDLFloat, 32, 1};
    case DType::f16:
      return {kDLFloat, 16, 1};
    case DType::bf16:
      return {kDLBfloat, 16, 1};
    case DType::f64:
      return {kDLFloat, 64, 1};
    case DType::i32:
      return {kDLInt, 32, 1};
    case DType::i64:
      return {kDLInt, 64, 1};
    case DType::u32:
      return {kDLUInt, 32, 1};
    case DType::u8:
      return {kDLUInt, 8, 1};
    case DType::boolean:
      return {kBoolCode, 8, 1};
  }
  return {kDLFloat, 32, 1};
}

Device device_from_dlpack(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
      return Device::cpu();
    case kDLCUDA:
    case kDLCUDAManaged:
      return Device::cuda(d.device_id);
    default:
      fail(ErrorCode::Unsupported,
           cat("from_dlpack: device type ", int(d.device_type), " is not supported"));
  }
}

// What an exported DLManagedTensor owns: the tensor (keeping its storage alive) and the
// shape/stride arrays the DLTensor points into.
struct ExportContext {
  Tensor tensor;
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed{};
};

}  // namespace

Tensor from_dlpack(DLManagedTensor* managed) {
  if (managed == nullptr) fail(ErrorCode::InvalidArgument, "from_dlpack: null DLManagedTensor");
  // Ownership passes to `owner` at once, so every failure below still runs the deleter.
  std::shared_ptr<DLManagedTensor> owner(managed, [](DLManagedTensor* m) {
    if (m->deleter) m->deleter(m);
  });
  const DLTensor& t = managed->dl_tensor;
  const DType dtype = dtype_from_dlpack(t.dtype);
  const Device device = device_from_dlpack(t.device);
  if (t.ndim < 0) fail(ErrorCode::InvalidArgument, "from_dlpack: negative ndim");
  Shape shape(t.shape, t.shape + t.ndim);
  Shape strides = t.strides ? Shape(t.strides, t.strides + t.ndim) : contiguous_strides(shape);
  const int64_t numel = shape_numel(shape);
  // DLPack carries no storage size: the view's own extent bounds it.
  int64_t extent = 0;
  if (numel > 0) {
    int64_t last = 0;
    for (int64_t i = 0; i < t.ndim; ++i) {
      if (strides[i] < 0)
        fail(ErrorCode::Unsupported,
             cat("from_dlpack: negative strides ", shape_str(strides), " are not supported"));
      last += (shape[i] - 1) * strides[i];
    }
    extent = last + 1;
  }
  void* base = static_cast<unsigned char*>(t.data) + t.byte_offset;
  const size_t bytes = static_cast<size_t>(extent) * dtype_size(dtype);
  return Tensor::from_blob(base, bytes, shape, strides, 0, dtype, device, [owner] {});
}

DLManagedTensor* to_dlpack(const Tensor& tensor) {
  if (!tensor.defined()) fail(ErrorCode::InvalidArgument, "to_dlpack: undefined tensor");
  auto* ctx = new ExportContext();
  ctx->tensor = tensor;
  ctx->shape = tensor.shape();
  ctx->strides = tensor.strides();
  DLTensor& t = ctx->managed.dl_tensor;
  t.data = tensor.data();
  const Device d = tensor.device();
  t.device = DLDevice{d.is_cpu() ? kDLCPU : kDLCUDA, d.index};
  t.ndim = static_cast<int32_t>(tensor.dim());
  t.dtype = dtype_to_dlpack(tensor.dtype());
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = [](DLManagedTensor* self) {
    delete static_cast<ExportContext*>(self->manager_ctx);
  };
  return &ctx->managed;
}

}  // namespace rudnn
