// One bind function per op family, each in python/src/bind_<family>.cpp; module.cpp calls
// them. A new family adds its file here, its line in module.cpp and its source in
// python/CMakeLists.txt.
#pragma once

#include <pybind11/pybind11.h>

namespace rudnn_py {

void bind_normalization(pybind11::module_& m);
void bind_transformer(pybind11::module_& m);
void bind_pooling(pybind11::module_& m);
void bind_grid_sample(pybind11::module_& m);
void bind_gated_delta(pybind11::module_& m);
void bind_ctc(pybind11::module_& m);
void bind_attention(pybind11::module_& m);
void bind_interpolation(pybind11::module_& m);
void bind_conv(pybind11::module_& m);
void bind_moe(pybind11::module_& m);
void bind_paged(pybind11::module_& m);

}  // namespace rudnn_py
