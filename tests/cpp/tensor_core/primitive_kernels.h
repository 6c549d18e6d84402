// Host entry points of the tiny kernels that test each tensor-core primitive
// (primitive_kernels_*.cu), callable from plain C++ tests (test_primitives.cpp). Each runs
// its kernel on the current CUDA device, synchronises, and throws std::runtime_error on a
// CUDA error. Values cross as host vectors; 16-bit values as their bit patterns.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace rudnn::test::tc {

// ---- What the device code of this test binary was built with (a probe kernel reports its
// own RUDNN_TC_* guards, so the answer is about the code the device actually runs).
struct DeviceCode {
  bool sm80 = false;   // mma.sync, ldmatrix, cp.async
  bool sm90 = false;   // mbarrier tx, TMA, clusters
  bool sm90a = false;  // wgmma, setmaxnreg
};
DeviceCode probe_device_code();

// ---- Host-side layout helpers of the layer (wgmma.cuh, tile_scheduler.cuh), compiled by
// nvcc and exposed here for CPU tests.
uint32_t operand_offset(bool mn_major, int span, int mn_extent, int k_extent, int mn, int k);
uint32_t operand_lbo(bool mn_major, int span, int mn_extent, int k_extent);
uint32_t operand_sbo(bool mn_major, int span, int mn_extent, int k_extent);
uint32_t swizzle(uint32_t offset, int span);
uint64_t descriptor(uint32_t start, uint32_t lbo, uint32_t sbo, int span);
std::array<int, 3> banded(int band_m, int group, int local, int m_tiles, int n_tiles);

// ---- mma.sync (sm_80+): one warp, fragments built in the kernel by the documented layouts.
// d[16 x 8] = a[16 x 16] (row-major) * b[16 x 8] (row-major, b[k][n]) + c[16 x 8].
std::vector<float> mma_16816(bool bf16, const std::vector<uint16_t>& a,
                             const std::vector<uint16_t>& b, const std::vector<float>& c);
// d[16 x 8] = tf32(a[16 x 8]) * tf32(b[8 x 8]) + c.
std::vector<float> mma_1688_tf32(const std::vector<float>& a, const std::vector<float>& b,
                                 const std::vector<float>& c);
// The bits of cvt.rna.tf32.f32 of each value.
std::vector<uint32_t> to_tf32_bits(const std::vector<float>& v);
// ldmatrix .x{count}{.trans} from a shared [32 rows][8] array of 16-bit `values` (matrix i =
// rows 8i..8i+7), lane l pointing at row l % 8 of matrix l / 8: out[lane * 4 + i] = register i.
std::vector<uint32_t> ldmatrix(int count, bool trans, const std::vector<uint16_t>& values);
// `chunks` 16-byte chunks through a 3-stage cp.async ring (128 threads, one chunk each per
// stage, stages of 128 chunks): chunk j takes valid[j] (0..16) bytes of src, zeros after.
std::vector<uint8_t> cp_async_ring(const std::vector<uint8_t>& src, const std::vector<int>& valid);

// ---- mbarrier (sm_90).
struct MbarrierPhases {
  std::vector<int> received;     // what the consumer warp read in each round
  std::array<int, 4> test_wait;  // fresh: parity 0, parity 1; after phase 0: parity 0, parity 1
};
MbarrierPhases mbarrier_phases(int rounds);
// Two bulk copies counted on one barrier: the first announced with expect_tx (no arrival), the
// second with arrive_expect_tx. Returns the shared buffer after the wait.
std::vector<uint8_t> mbarrier_bulk_copies(const std::vector<uint8_t>& first,
                                          const std::vector<uint8_t>& second);
// Cluster of 2: each block's thread 0 arrives on its own and on the peer's barrier (count 2),
// everyone waits. Returns per block {rank, 1 if the wait returned}.
std::vector<int> mbarrier_cluster_arrivals();

// ---- TMA (sm_90). `x` is a dense f32 tensor of dims (innermost first; rank = dims.size()),
// the box dense in shared memory; returns the box as loaded.
std::vector<float> tma_load_box(const std::vector<float>& x, const std::vector<int64_t>& dims,
                                const std::vector<int>& box, const std::vector<int>& coords);
// A [rows][span / 2] bf16 matrix (as bits) loaded as one box with the span's swizzle; returns
// the raw shared-memory contents (as 16-bit words).
std::vector<uint16_t> tma_load_swizzled(const std::vector<uint16_t>& x, int rows, int span);
// Stores a box of `box_values` (dense) into a tensor of dims holding `initial`, at coords.
std::vector<float> tma_store_box(const std::vector<float>& initial,
                                 const std::vector<int64_t>& dims, const std::vector<int>& box,
                                 const std::vector<int>& coords,
                                 const std::vector<float>& box_values);
// Cluster of 2: block r loads rows [8r, 8r + 8) of a 16 x 32 f32 box at (c0, c1) of a
// [rows][cols] tensor and multicasts them to both blocks. Returns both blocks' boxes.
std::vector<float> tma_multicast(const std::vector<float>& x, int rows, int cols, int c0, int c1);

// ---- Warp-specialised ring (sm_90a): producer warpgroup (setmaxnreg 40, one thread issuing
// TMA loads of 16 x 64 f32 blocks of x [blocks * 16][64]) and two consumer warpgroups
// (setmaxnreg 232) summing each column over a 3-stage ring. Returns the 64 column sums.
std::vector<float> ring_column_sums(const std::vector<float>& x, int blocks);

// ---- wgmma (sm_90a). a [64][64], b [64][n] (b[k][n]), row-major 16-bit bits; the operands
// stored in shared memory as OperandTile{major, span} (span 0, 32, 64, 128). Returns D
// [64][n] from the documented accumulator layout. n in {16, 32, 64, 96, 128, 192, 256}; not
// every (dtype, n, majors) combination is instantiated (wgmma_ss_available says).
bool wgmma_ss_available(bool bf16, int n, bool a_mn_major, bool b_mn_major);
std::vector<float> wgmma_ss(bool bf16, int n, bool a_mn_major, int a_span, bool b_mn_major,
                            int b_span, const std::vector<uint16_t>& a,
                            const std::vector<uint16_t>& b);
// A from registers (built from `a` by the documented fragment layout), B in shared memory.
bool wgmma_rs_available(bool bf16, int n, bool b_mn_major);
std::vector<float> wgmma_rs(bool bf16, int n, bool b_mn_major, int b_span,
                            const std::vector<uint16_t>& a, const std::vector<uint16_t>& b);
// S = A[64 x 16] . B[16 x 16] (ss), P = bf16(S) as the A fragment (accumulator_to_a), D =
// P . V[16 x 64] (rs). Returns D [64][64].
std::vector<float> wgmma_chain(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                               const std::vector<uint16_t>& v);

// ---- Persistent tile scheduler: `blocks` blocks walk the tiles of groups with `counts`
// tiles each. Returns per tile {visits, group, local index}.
std::vector<std::array<int, 3>> scheduler_walk(const std::vector<int>& counts, int blocks);

}  // namespace rudnn::test::tc
