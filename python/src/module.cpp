// rudnn._rudnn: the pybind11 module of ruDNN. bind_core (interop.cpp) binds the exceptions,
// the Tensor class and from_dlpack; each family's bind_<family>.cpp binds its ops. The
// package rudnn (python/rudnn/) wraps these; use it rather than this module.
#include "bind_families.h"
#include "interop.h"

PYBIND11_MODULE(_rudnn, m) {
  m.doc() = "ruDNN native binding (use the `rudnn` package rather than this module directly).";
  rudnn_py::bind_core(m);
  rudnn_py::bind_normalization(m);
  rudnn_py::bind_transformer(m);
  rudnn_py::bind_pooling(m);
  rudnn_py::bind_grid_sample(m);
  rudnn_py::bind_gated_delta(m);
  rudnn_py::bind_ctc(m);
  rudnn_py::bind_attention(m);
  rudnn_py::bind_interpolation(m);
  rudnn_py::bind_conv(m);
  rudnn_py::bind_moe(m);
  rudnn_py::bind_paged(m);
}
