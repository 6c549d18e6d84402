// The CPU reference of the paged family: the ops' definition in float64 loops over the keys
// each query sees, gathered page by page through the schedule.
#pragma once

#include "paged_attention/problem.h"

namespace rudnn::paged::reference {

void forward(const PagedForward& p);
void write(const PagedWrite& p);

}  // namespace rudnn::paged::reference
