// The CPU reference of the paged family: the ops' definition in float64 loops over the keys
// each query sees, gathered page by page through the schedule.
#pragma once

#include "paged_attention/problem.h"

namespace rudnn::paged::reference {

void forward(const PagedForward& p);
void write(const PagedWrite& p);
// Recomputes each query's probabilities in float64 and writes every requested gradient,
// rounded once; history gradients accumulate in float64 host buffers of the caches' size.
void backward(const PagedBackward& p);

}  // namespace rudnn::paged::reference
