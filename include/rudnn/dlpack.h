// Zero-copy exchange with other frameworks through DLPack (the unversioned
// DLManagedTensor of DLPack 0.6 and later).
//
// Dtypes: float 16/32/64, bfloat 16, int 32/64, uint 8/32, bool. Devices: kDLCPU,
// kDLCUDAHost (as the CPU), kDLCUDA and kDLCUDAManaged (as cuda:<device_id>).
//
// Neither direction orders streams: the producer's data must be ready on the stream the
// consumer uses (the Python binding passes the caller's stream to __dlpack__ for that).
#pragma once

#include "rudnn/tensor.h"

struct DLManagedTensor;

namespace rudnn {

// Wraps `managed`'s memory as a Tensor. Takes ownership: its deleter runs when the last
// handle to the memory goes, or before this throws (unsupported dtype or device,
// negative strides).
Tensor from_dlpack(DLManagedTensor* managed);

// Exports `tensor` (its view: shape, strides, offset). The DLManagedTensor keeps the
// storage alive until the consumer calls its deleter.
DLManagedTensor* to_dlpack(const Tensor& tensor);

}  // namespace rudnn
