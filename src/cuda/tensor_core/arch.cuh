// Which tensor-core generation the device code being compiled has (device side), for the
// guards of src/cuda/tensor_core/. Every primitive's body is compiled only where its
// instructions exist, so that a build for RUDNN_CUDA_ARCHS="80;90a" compiles every file:
//
//   RUDNN_TC_SM80    mma.sync (bf16/f16/tf32), ldmatrix, cp.async      sm_80 and later
//   RUDNN_TC_SM90    mbarrier tx-counts, TMA, clusters, bulk copies    sm_90 and later
//   RUDNN_TC_SM90A   wgmma, setmaxnreg (arch-specific: sm_90a only, not forward compatible)
//
// Below its generation a primitive compiles to nothing (or a trap where a silent no-op would
// give wrong results); the host decides which kernel to launch from what was compiled
// (gemm/launch.h's hopper_kernel_usable, cuda/launch.cuh's built_for_hopper), never from the
// device alone. In host code and in the host pass of nvcc all three are 0.
#pragma once

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define RUDNN_TC_SM80 1
#else
#define RUDNN_TC_SM80 0
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define RUDNN_TC_SM90 1
#else
#define RUDNN_TC_SM90 0
#endif

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RUDNN_TC_SM90A 1
#else
#define RUDNN_TC_SM90A 0
#endif
