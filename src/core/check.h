// Internal helpers for building error messages and checking arguments.
#pragma once

#include <sstream>
#include <string>
#include <utility>

#include "rudnn/error.h"
#include "rudnn/tensor.h"

namespace rudnn::detail {

// Concatenates anything streamable: cat("rms_norm: gamma has shape ", shape_str(s)).
template <class... Parts>
std::string cat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

[[noreturn]] inline void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

template <class... Parts>
void check(bool ok, ErrorCode code, Parts&&... parts) {
  if (!ok) fail(code, cat(std::forward<Parts>(parts)...));
}

}  // namespace rudnn::detail
