// Devices: the host CPU, or one CUDA GPU by index.
#pragma once

#include <string>

namespace rudnn {

struct Device {
  enum class Kind : unsigned char { cpu, cuda };

  Kind kind = Kind::cpu;
  int index = 0;  // CUDA ordinal; always 0 for the CPU

  static constexpr Device cpu() noexcept { return Device{Kind::cpu, 0}; }
  static constexpr Device cuda(int index = 0) noexcept { return Device{Kind::cuda, index}; }

  constexpr bool is_cpu() const noexcept { return kind == Kind::cpu; }
  constexpr bool is_cuda() const noexcept { return kind == Kind::cuda; }
  friend constexpr bool operator==(const Device&, const Device&) = default;

  // "cpu" or "cuda:0".
  std::string str() const;
};

// Whether this build of ruDNN has CUDA support compiled in (RUDNN_CUDA).
bool built_with_cuda() noexcept;

// CUDA devices visible to this process; 0 in a CPU-only build or without a usable driver.
// Never throws.
int cuda_device_count() noexcept;

// Whether at least one CUDA device is usable.
inline bool cuda_available() noexcept { return cuda_device_count() > 0; }

}  // namespace rudnn
