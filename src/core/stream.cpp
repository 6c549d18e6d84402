#include "rudnn/stream.h"

#include <mutex>
#include <vector>

#include "core/check.h"
#include "core/cuda_api.h"

namespace rudnn {

struct Stream::Impl {
  Device device;
  cuda_stream_t handle = nullptr;
  bool owned = false;

  Impl(Device d, cuda_stream_t h, bool o) : device(d), handle(h), owned(o) {}
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (owned) detail::cuda::stream_destroy(device, handle);
  }
};

namespace {

// Per-thread overrides set by StreamGuard, indexed by CUDA ordinal.
thread_local std::vector<Stream> t_current;

}  // namespace

Stream Stream::cpu() {
  static const auto impl = std::make_shared<Impl>(Device::cpu(), nullptr, false);
  return Stream(impl);
}

Stream Stream::create(Device device) {
  if (device.is_cpu()) return cpu();
  detail::cuda::require_device(device, "Stream::create");
  return Stream(std::make_shared<Impl>(device, detail::cuda::stream_create(device), true));
}

Stream Stream::borrow(Device device, cuda_stream_t handle) {
  detail::check(device.is_cuda(), ErrorCode::InvalidArgument, "Stream::borrow: ", device.str(),
                " is not a CUDA device");
  detail::cuda::require_device(device, "Stream::borrow");
  return Stream(std::make_shared<Impl>(device, handle, false));
}

Device Stream::device() const {
  detail::check(impl_ != nullptr, ErrorCode::InvalidArgument,
                "Stream::device: the default Stream has no device until an op resolves it");
  return impl_->device;
}

cuda_stream_t Stream::handle() const noexcept { return impl_ ? impl_->handle : nullptr; }

void Stream::synchronize() const {
  if (impl_ == nullptr || impl_->device.is_cpu()) return;  // CPU work already ran inline
  detail::cuda::stream_synchronize(impl_->device, impl_->handle);
}

void Stream::wait(const Stream& other) const {
  const Device mine = device(), theirs = other.device();
  if (mine != theirs) {
    detail::fail(ErrorCode::DeviceMismatch,
                 detail::cat("Stream::wait: this stream is on ", mine.str(), ", the other on ",
                             theirs.str()));
  }
  if (mine.is_cpu() || *this == other) return;
  detail::cuda::stream_wait(mine, impl_->handle, other.impl_->handle);
}

bool operator==(const Stream& a, const Stream& b) noexcept {
  if (a.impl_ == b.impl_) return true;
  if (a.impl_ == nullptr || b.impl_ == nullptr) return false;
  return a.impl_->device == b.impl_->device && a.impl_->handle == b.impl_->handle;
}

Stream current_stream(Device device) {
  if (device.is_cpu()) return Stream::cpu();
  detail::cuda::require_device(device, "current_stream");
  const auto index = static_cast<size_t>(device.index);
  if (index < t_current.size() && !t_current[index].is_default()) return t_current[index];
  // The legacy default stream of each device, shared by every thread.
  static std::mutex mutex;
  static std::vector<Stream> defaults;
  std::lock_guard<std::mutex> lock(mutex);
  if (defaults.size() <= index) defaults.resize(index + 1);
  if (defaults[index].is_default()) defaults[index] = Stream::borrow(device, nullptr);
  return defaults[index];
}

StreamGuard::StreamGuard(const Stream& stream) : device_(stream.device()) {
  if (device_.is_cpu()) return;
  const auto index = static_cast<size_t>(device_.index);
  if (t_current.size() <= index) t_current.resize(index + 1);
  previous_ = t_current[index];
  t_current[index] = stream;
}

StreamGuard::~StreamGuard() {
  if (device_.is_cpu()) return;
  t_current[static_cast<size_t>(device_.index)] = previous_;
}

Stream resolve_stream(const Stream& stream, Device device, const char* op) {
  if (stream.is_default()) return current_stream(device);
  if (stream.device() != device) {
    detail::fail(ErrorCode::DeviceMismatch,
                 detail::cat(op, ": stream is on ", stream.device().str(), ", operands are on ",
                             device.str()));
  }
  return stream;
}

}  // namespace rudnn
