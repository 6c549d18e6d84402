// ruDNN error model.
//
// Every user error (bad shape, dtype, device, stream, option value) and every CUDA failure
// surfaces as a rudnn::Error. Its message names the operation, the argument and the rule,
// e.g. "rms_norm: gamma has shape [512], expected [H] = [1024]". Ops validate all
// arguments before they allocate or launch anything, so a rejected call leaves no output
// behind and never touches its inputs.
#pragma once

#include <stdexcept>
#include <string>

namespace rudnn {

enum class ErrorCode {
  InvalidArgument,  // a value outside its domain (eps <= 0, empty axis, bad option)
  ShapeMismatch,    // a shape that contradicts another operand or the op's rule
  DTypeMismatch,    // a dtype the op does not take, or operands that must agree but differ
  DeviceMismatch,   // operands (or a stream) on different devices
  Unsupported,      // valid in principle, not provided (e.g. CUDA tensor in a CPU-only build)
  OutOfMemory,      // an allocation failed
  Cuda,             // the CUDA runtime reported an error
};

// The name of an error code, e.g. "ShapeMismatch".
const char* error_code_name(ErrorCode code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace rudnn
