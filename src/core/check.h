// Internal helpers for building error messages and checking arguments.
#pragma once

#include <charconv>
#include <concepts>
#include <string>
#include <string_view>
#include <utility>

#include "rudnn/error.h"
#include "rudnn/tensor.h"

namespace rudnn::detail {

// Message pieces are appended with std::to_chars, never through iostreams: a message must
// not depend on the global C++ locale, and iostreams misbehave when a host process (a Python
// interpreter, say) has loaded another libstdc++ than the one ruDNN was built against.
inline void append(std::string& out, std::string_view s) { out += s; }
inline void append(std::string& out, const char* s) { out += s; }
inline void append(std::string& out, char c) { out += c; }
template <std::same_as<bool> B>  // exactly bool: a pointer must not convert to it
void append(std::string& out, B b) {
  out += b ? "true" : "false";
}
template <class T>
requires(std::integral<T> && !std::same_as<T, bool> &&
         !std::same_as<T, char>) void append(std::string& out, T v) {
  char buf[24];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  out.append(buf, end);
}
template <std::floating_point T>
void append(std::string& out, T v) {
  char buf[40];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;  // shortest round-trip form
  out.append(buf, end);
}

// Concatenates strings, characters, numbers: cat("rms_norm: gamma has shape ", shape_str(s)).
template <class... Parts>
std::string cat(Parts&&... parts) {
  std::string out;
  (append(out, std::forward<Parts>(parts)), ...);
  return out;
}

[[noreturn]] inline void fail(ErrorCode code, const std::string& message) {
  throw Error(code, message);
}

template <class... Parts>
void check(bool ok, ErrorCode code, Parts&&... parts) {
  if (!ok) fail(code, cat(std::forward<Parts>(parts)...));
}

}  // namespace rudnn::detail
