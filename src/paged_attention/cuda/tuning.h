// Launch choices of the paged kernels that the benchmark harness (rudnn_bench --variants)
// and the GPU tests may override, so that alternatives can be timed side by side and each
// one stays tested. Not part of the public API. Not synchronised: set it before launching
// from several threads.
#pragma once

namespace rudnn::paged::cuda {

struct KernelTuning {
  // Decode schedules run the decode kernel (decode.cuh) when it takes the shape; false: the
  // general kernel.
  bool decode_kernel = true;
  // The decode kernel's __launch_bounds__ minimum of resident blocks per multiprocessor for
  // Hq / Hkv <= 4: 1 keeps everything in registers (G = 4, D = 128: two blocks fit); 3 caps
  // the registers at 168 so that three fit, at the price of about 130 spilled bytes.
  int decode_min_blocks = 1;
  // The decode kernel loads the next tile's keys while it uses a tile's values (true), or
  // every load of a tile at its start (false).
  bool decode_pipelined = true;
  // F16 / BF16 decode schedules run the tensor-core decode kernel (decode_tc.cuh); false: the
  // CUDA-core one (F32 always does).
  bool decode_tensor_cores = true;
  // Tiles of 16 keys each warp of the tensor-core decode kernel keeps staged for D = 128: 2
  // (three blocks fit a multiprocessor, one tile in flight per warp), 3 (two blocks, two
  // tiles) or 4 (one block, three tiles).
  int decode_stages = 3;
  // The internal split: blocks wanted per multiprocessor by the decode and general kernels.
  int decode_blocks_per_sm = 16;
  int general_blocks_per_sm = 2;
  // KV heads per block of the tensor-core decode kernel, at most (1, 2 or 4; the most that
  // divides Hkv is taken): with more, the warps of a block read the rows of several heads of
  // one page side by side (longer contiguous runs of the paged layout), each warp over more
  // of the keys.
  int decode_heads_per_block = 1;
  // Decode splits sized in waves (0: by decode_blocks_per_sm): at most decode_waves times
  // decode_resident blocks per multiprocessor (the residency assumed), as many splits as fit
  // (the fewest blocks are one wave, no idle tail of a partial wave). One wave is the
  // default: B64 Hq32 Hkv8 S4096 D128 page 16 reads K and V at 84.3 % of copy against 75.2 %
  // by blocks per multiprocessor (round 50, bench/RESULTS.md).
  int decode_waves = 1;
  int decode_resident = 4;
  // The decode grid takes the KV-head groups fastest (the blocks that read one page run
  // side by side), else the splits.
  bool decode_heads_fastest = false;
};

// The KV heads per block the tensor-core decode kernel takes for Hkv = heads_kv.
inline int tc_decode_heads(const KernelTuning& t, long long heads_kv) {
  for (int h = 4; h > 1; h /= 2)
    if (h <= t.decode_heads_per_block && heads_kv % h == 0) return h;
  return 1;
}

KernelTuning& kernel_tuning();

}  // namespace rudnn::paged::cuda
