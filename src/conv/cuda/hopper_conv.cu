// Host side of the Hopper implicit-GEMM convolution (hopper_conv.cuh): the output tiling, the
// input's 5-D and the weight's tensor maps, the GEMM arguments; and the bf16 kernels.
//
// Tiling. A tile of 128 GEMM rows is a box of tile[0] x tile[1] x tile[2] x tile[3] output
// pixels (x, y, z, image), powers of two, chosen to compute the fewest rows (pixels of the
// boxes outside the output are loaded as zeros and skipped by the epilogue): 56 x 56 runs
// 8 x 8 x 2-image boxes with none wasted. (A 64 x 2 box would waste 12.5 %; the box's shape
// costs TMA nothing when C >= 64: each pixel is a 128-byte row anyway.) A 1 x 1 stride-1 unpadded
// convolution over a pixel-dense input is a plain GEMM [pixels, C] x [K, C]^T: it runs as a
// 1-D problem of all pixels (128 per tile, no waste).
//
// Maps. Input {C, X, Y, Z, N} with the box {64, tile x stride per axis}, traversed by the
// stride (element strides; TMA allows 1 .. 8) and 128-byte swizzled: one box is the K-major
// A tile of the GEMM kernel, byte for byte. Weight (KRSC, dense) as the GEMM's K-major B
// {taps x C, K}: k-block (tap, c0) starts at k = tap C + c0. Where C is not a multiple of 64
// the last channel block of a tap reads the next tap's first channels in B, which meet A's
// zero-filled channels past C (a non-finite weight there would give NaN: such weights give
// non-finite outputs anyway).
#include "conv/cuda/hopper_conv.cuh"

#include <algorithm>

#include "conv/cuda/launch.h"
#include "cuda/launch.cuh"
#include "cuda/tensor_core/tensor_map.h"
#include "gemm/launch.h"

namespace rudnn::conv_detail::cuda {

template void run_hopper_conv<__nv_bfloat16, 64>(const HopperConvCall&, cudaStream_t, Device);
template void run_hopper_conv<__nv_bfloat16, 128>(const HopperConvCall&, cudaStream_t, Device);
template void run_hopper_conv<__nv_bfloat16, 256>(const HopperConvCall&, cudaStream_t, Device);
extern template void run_hopper_conv<__half, 64>(const HopperConvCall&, cudaStream_t, Device);
extern template void run_hopper_conv<__half, 128>(const HopperConvCall&, cudaStream_t, Device);
extern template void run_hopper_conv<__half, 256>(const HopperConvCall&, cudaStream_t, Device);

namespace {

// Whether the pixels of an operand with extents (x, y, z, n) lie densely at `pixel` elements
// apart, x fastest (axes of extent 1 may have any stride).
bool pixel_dense(const Strides& st, const int64_t ext[4], int64_t pixel) {
  const int64_t strides[4] = {st.sp[2], st.sp[1], st.sp[0], st.n};
  int64_t expected = pixel;
  for (int a = 0; a < 4; ++a) {
    if (ext[a] != 1 && strides[a] != expected) return false;
    expected *= ext[a];
  }
  return true;
}

}  // namespace

bool hopper_conv_fits(const Forward& p, Device device) {
  const ConvShape& s = p.s;
  if (s.dtype != DType::bf16 && s.dtype != DType::f16) return false;
  if (s.groups != 1 || s.in_channels % 8 != 0) return false;
  const int64_t C = s.in_channels, K = s.out_channels, limit = int64_t{1} << 31;
  for (int a = 0; a < 3; ++a) {
    if (s.stride[a] > 8 || s.in[a] >= limit || s.pad[a] >= limit / 4) return false;
    if (s.dilation[a] * s.kernel[a] >= limit / 4) return false;
  }
  if (s.batch >= limit || K >= limit || s.taps() * C >= limit) return false;
  // Upper bound of the tile grid's rows (each axis rounded up to its tile: at most doubled).
  if ((2 * s.batch + 128) * 2 * s.out[0] * 2 * s.out[1] * 2 * s.out[2] >= limit) return false;
  if (p.input_st.c != 1 || p.input_st.n % 8 != 0 ||
      reinterpret_cast<uintptr_t>(p.input) % 16 != 0)
    return false;
  for (int a = 0; a < 3; ++a)
    if (p.input_st.sp[a] % 8 != 0) return false;
  const int64_t taps_ext[4] = {s.kernel[2], s.kernel[1], s.kernel[0], K};
  if (p.weight_st.c != 1 || !pixel_dense(p.weight_st, taps_ext, C) ||
      (K > 1 && p.weight_st.n != s.taps() * C) || reinterpret_cast<uintptr_t>(p.weight) % 16 != 0)
    return false;
  const int64_t out_ext[4] = {s.out[2], s.out[1], s.out[0], s.batch};
  if (p.out_st.c != 1 || !pixel_dense(p.out_st, out_ext, K)) return false;
  if (p.residual != nullptr && (p.residual_st.c != 1 || !pixel_dense(p.residual_st, out_ext, K)))
    return false;
  // plan_conv may name a device this process does not have: no Hopper kernel there.
  if (!device.is_cuda() || device.index >= cuda_device_count()) return false;
  return gemm::kernels::hopper_kernel_usable(device);
}

void hopper_implicit_gemm_forward(const Forward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  const ConvShape& s = p.s;
  const CUtensorMapDataType type = s.dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                          : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const int64_t C = s.in_channels, K = s.out_channels, taps = s.taps();
  // Axes as x, y, z, n (ConvShape keeps z, y, x).
  int64_t in_ext[4] = {s.in[2], s.in[1], s.in[0], s.batch};
  int64_t out_ext[4] = {s.out[2], s.out[1], s.out[0], s.batch};
  int64_t in_st[4] = {p.input_st.sp[2], p.input_st.sp[1], p.input_st.sp[0], p.input_st.n};
  int stride[3] = {static_cast<int>(s.stride[2]), static_cast<int>(s.stride[1]),
                   static_cast<int>(s.stride[0])};
  int dilation[3] = {static_cast<int>(s.dilation[2]), static_cast<int>(s.dilation[1]),
                     static_cast<int>(s.dilation[0])};
  int pad[3] = {static_cast<int>(s.pad[2]), static_cast<int>(s.pad[1]),
                static_cast<int>(s.pad[0])};
  const bool pointwise = taps == 1 && s.stride[0] == 1 && s.stride[1] == 1 &&
                         s.stride[2] == 1 && s.pad[0] == 0 && s.pad[1] == 0 && s.pad[2] == 0;
  if (pointwise) {
    int64_t pixel = C;  // the innermost stride of an axis with more than one pixel
    for (int a = 3; a >= 0; --a)
      if (in_ext[a] > 1) pixel = in_st[a];
    if (pixel_dense(p.input_st, in_ext, pixel)) {
      in_ext[0] = out_ext[0] = s.batch * s.in_space();
      for (int a = 1; a < 4; ++a) in_ext[a] = out_ext[a] = 1;
      in_st[0] = pixel;
    }
  }
  // Strides of extent-1 axes: any value is right (only coordinate 0 is ever inside), so that
  // of a dense layout, which the encoder accepts.
  int64_t prev = C, prev_ext = 1;
  for (int a = 0; a < 4; ++a) {
    if (in_ext[a] == 1) in_st[a] = prev * prev_ext;
    prev = in_st[a];
    prev_ext = in_ext[a];
  }

  // The tile with the fewest rows computed (pixels of its boxes, in and out of the output),
  // then the widest along x, then y: 56 x 56 runs 8 x 8 x 2 images, 7 x 7 x 32 images 8 x 1
  // x 16 images, 16 x 56 x 56 (3-D) 8 x 8 x 2.
  gk::ConvTiling t{};
  int64_t best = -1;
  for (int tx = 1; tx <= 128; tx *= 2) {
    for (int ty = 1; tx * ty <= 128; ty *= 2) {
      for (int tz = 1; tx * ty * tz <= 128; tz *= 2) {
        const int tn = 128 / (tx * ty * tz);
        const int ext[4] = {tx, ty, tz, tn};
        int64_t rows = 1;
        bool fits = true;
        for (int a = 0; a < 4; ++a) {
          fits = fits && ext[a] * (a < 3 ? stride[a] : 1) <= 256;
          rows *= (out_ext[a] + ext[a] - 1) / ext[a] * ext[a];
        }
        if (!fits || (best >= 0 && rows > best)) continue;
        best = rows;
        for (int a = 0; a < 4; ++a) t.tile[a] = ext[a];
      }
    }
  }
  for (int a = 0; a < 3; ++a) {
    t.tiles[a] = static_cast<int>((out_ext[a] + t.tile[a] - 1) / t.tile[a]);
    t.out[a] = static_cast<int>(out_ext[a]);
  }
  t.out[3] = static_cast<int>(out_ext[3]);
  const int64_t m_tiles = int64_t{t.tiles[0]} * t.tiles[1] * t.tiles[2] *
                          ((out_ext[3] + t.tile[3] - 1) / t.tile[3]);

  HopperConvCall c{};
  c.rows.t = t;
  c.loader.t = t;
  for (int a = 0; a < 3; ++a) {
    c.loader.stride[a] = stride[a];
    c.loader.dilation[a] = dilation[a];
    c.loader.pad[a] = pad[a];
  }
  c.loader.kernel[0] = static_cast<int>(s.kernel[2]);
  c.loader.kernel[1] = static_cast<int>(s.kernel[1]);
  c.loader.c_blocks = static_cast<int>((C + 63) / 64);
  c.loader.channels = static_cast<int>(C);
  c.activation = p.activation;

  rudnn::cuda::tc::TensorMapSpec a;
  a.type = type;
  a.rank = 5;
  a.base = p.input;
  a.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  a.dims[0] = static_cast<uint64_t>(C);
  a.box[0] = 64;
  for (int i = 0; i < 4; ++i) {
    a.dims[i + 1] = static_cast<uint64_t>(in_ext[i]);
    a.strides[i] = static_cast<uint64_t>(in_st[i]) * 2;
    a.box[i + 1] = static_cast<uint32_t>(t.tile[i] * (i < 3 ? stride[i] : 1));
    a.element_strides[i + 1] = static_cast<uint32_t>(i < 3 ? stride[i] : 1);
  }
  c.map_a = rudnn::cuda::tc::encode_tensor_map(a);

  gk::GemmArgs& g = c.args;
  g.m = m_tiles * 128;
  g.n = K;
  g.k = taps * c.loader.c_blocks * 64;
  g.groups = 1;
  g.a = p.input;
  g.a_m = 0;
  g.a_k = 1;
  g.b = p.weight;
  g.b_k = 1;
  g.b_n = taps * C;
  g.d = p.out;
  g.ldd = K;
  g.c = p.residual;
  g.ldc = K;
  g.bias = p.bias;
  g.alpha = 1.0f;
  g.beta = p.residual != nullptr ? 1.0f : 0.0f;
  g.activation = 0;
  g.out_f32 = false;
  g.pair_stores = K % 2 == 0 && reinterpret_cast<uintptr_t>(p.out) % 4 == 0;
  g.cluster_m = 1;
  g.tma_store = false;
  g.splits = 1;

  // Tile width: 64 for K <= 64 (ResNet's and the conv3d anchor's narrow layers: a 128-wide
  // tile would compute half zeros), 256 where K is a multiple of it (fewer, wider tiles load
  // A fewer times), else 128.
  const int block_n = K <= 64 ? 64 : K % 256 == 0 ? 256 : 128;
  rudnn::cuda::tc::TensorMapSpec b;
  b.type = type;
  b.rank = 3;
  b.base = p.weight;
  b.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  b.dims[0] = static_cast<uint64_t>(taps * C);
  b.dims[1] = static_cast<uint64_t>(K);
  b.dims[2] = 1;
  b.strides[0] = static_cast<uint64_t>(taps * C) * 2;  // dense KRSC (hopper_conv_fits)
  b.strides[1] = b.strides[0] * static_cast<uint64_t>(K);
  b.box[0] = 64;
  b.box[1] = static_cast<uint32_t>(block_n);
  b.box[2] = 1;
  c.map_b = rudnn::cuda::tc::encode_tensor_map(b);
  c.tiles = m_tiles * ((K + block_n - 1) / block_n);

  const bool bf16 = s.dtype == DType::bf16;
  if (block_n == 64) {
    bf16 ? run_hopper_conv<__nv_bfloat16, 64>(c, ctx.stream, ctx.device)
         : run_hopper_conv<__half, 64>(c, ctx.stream, ctx.device);
  } else if (block_n == 256) {
    bf16 ? run_hopper_conv<__nv_bfloat16, 256>(c, ctx.stream, ctx.device)
         : run_hopper_conv<__half, 256>(c, ctx.stream, ctx.device);
  } else {
    bf16 ? run_hopper_conv<__nv_bfloat16, 128>(c, ctx.stream, ctx.device)
         : run_hopper_conv<__half, 128>(c, ctx.stream, ctx.device);
  }
}

}  // namespace rudnn::conv_detail::cuda
