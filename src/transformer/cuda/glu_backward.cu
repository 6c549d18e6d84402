// SwiGLU / GeGLU backward entry point (glu.cuh).
#include "transformer/cuda/glu.cuh"

namespace rudnn::transformer::cuda {

void glu_backward(const GluBackward& p, const Stream& stream) {
  const LaunchContext ctx(stream);
  with_float_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int W = 16 / sizeof(T);
    Alignment a{W, sizeof(T)};
    for (const auto& [data, stride] :
         {std::pair{static_cast<const void*>(p.dy.data), p.dy.stride},
          std::pair{static_cast<const void*>(p.gate.data), p.gate.stride},
          std::pair{static_cast<const void*>(p.up.data), p.up.stride},
          std::pair{static_cast<const void*>(p.dgate.data), p.dgate.stride},
          std::pair{static_cast<const void*>(p.dup.data), p.dup.stride}}) {
      a.pointer(data);
      a.stride(stride, p.rows);
    }
    a.count(p.cols);
    const GluLaunch l = glu_launch(p.rows, a.ok ? p.cols / W : p.cols);
    with_glu_kind(p.kind, [&](auto kind) {
      if (a.ok) {
        glu_backward_kernel<T, W, decltype(kind)::value><<<l.grid, l.block, 0, ctx.stream>>>(p);
      } else {
        glu_backward_kernel<T, 1, decltype(kind)::value><<<l.grid, l.block, 0, ctx.stream>>>(p);
      }
    });
  });
  detail::check_launch("glu_backward");
}

}  // namespace rudnn::transformer::cuda
