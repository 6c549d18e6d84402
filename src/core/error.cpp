#include "rudnn/error.h"
#include "rudnn/version.h"

namespace rudnn {

const char* error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::InvalidArgument:
      return "InvalidArgument";
    case ErrorCode::ShapeMismatch:
      return "ShapeMismatch";
    case ErrorCode::DTypeMismatch:
      return "DTypeMismatch";
    case ErrorCode::DeviceMismatch:
      return "DeviceMismatch";
    case ErrorCode::Unsupported:
      return "Unsupported";
    case ErrorCode::OutOfMemory:
      return "OutOfMemory";
    case ErrorCode::Cuda:
      return "Cuda";
  }
  return "Unknown";
}

const char* version() noexcept { return RUDNN_VERSION_STRING; }

}  // namespace rudnn
