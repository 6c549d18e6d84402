// Streams: ordered execution queues.
//
// Every op takes a `const Stream&` as its last argument. A default-constructed Stream means
// "the current stream of the operands' device" (see current_stream). A CPU stream runs work
// inline. A CUDA stream is either owned (created by ruDNN, destroyed with its last handle)
// or borrowed (the caller's cudaStream_t; the caller keeps it alive for as long as any ruDNN
// tensor allocated on it lives).
//
// This header does not include the CUDA headers: cuda_stream_t is the same type as
// cudaStream_t, so a cudaStream_t converts implicitly.
#pragma once

#include <memory>

#include "rudnn/device.h"

struct CUstream_st;

namespace rudnn {

using cuda_stream_t = CUstream_st*;

class Stream {
 public:
  // The "default" stream: resolved per op to current_stream(operand device).
  Stream() = default;

  // The host stream (work runs inline on the calling thread).
  static Stream cpu();
  // A new non-blocking CUDA stream on `device`, destroyed with its last handle.
  static Stream create(Device device);
  // The caller's CUDA stream on `device` (nullptr is the legacy default stream).
  static Stream borrow(Device device, cuda_stream_t handle);

  // True for a default-constructed Stream (resolved by each op).
  bool is_default() const noexcept { return impl_ == nullptr; }
  // The stream's device. Throws InvalidArgument on the default Stream.
  Device device() const;
  // The CUDA handle (nullptr for the legacy default stream and for CPU streams).
  cuda_stream_t handle() const noexcept;

  // Blocks the calling thread until all work queued on this stream has finished.
  void synchronize() const;

  // Makes work queued on this stream from now on wait for the work queued on `other` so far
  // (an event recorded on `other`; the host does not wait). Both streams must be on the same
  // device (else DeviceMismatch); on the CPU, and when both are the same stream, nothing to do.
  void wait(const Stream& other) const;

  friend bool operator==(const Stream& a, const Stream& b) noexcept;

  struct Impl;

 private:
  explicit Stream(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

// The calling thread's current stream for `device`: the innermost StreamGuard's, else the
// device's legacy default CUDA stream (the CPU stream for the CPU).
Stream current_stream(Device device);

// Makes `stream` the current stream of its device on this thread until destroyed.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
  Device device_;
};

// Resolves an op's stream argument for operands on `device`: the default Stream becomes
// current_stream(device); any other stream must be on `device`, else DeviceMismatch naming
// `op`.
Stream resolve_stream(const Stream& stream, Device device, const char* op);

}  // namespace rudnn
