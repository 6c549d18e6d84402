// ruDNN: neural-network operators for CUDA GPUs, with a CPU reference for every op.
// Include this for everything, or the per-family headers for less.
#pragma once

#include "rudnn/allocator.h"
#include "rudnn/attention.h"
#include "rudnn/autotune.h"
#include "rudnn/conv.h"
#include "rudnn/device.h"
#include "rudnn/dlpack.h"
#include "rudnn/ctc.h"
#include "rudnn/dtype.h"
#include "rudnn/error.h"
#include "rudnn/gated_delta.h"
#include "rudnn/grid_sample.h"
#include "rudnn/interpolation.h"
#include "rudnn/moe.h"
#include "rudnn/normalization.h"
#include "rudnn/paged_attention.h"
#include "rudnn/pooling.h"
#include "rudnn/stream.h"
#include "rudnn/tensor.h"
#include "rudnn/transformer.h"
#include "rudnn/version.h"
