// Validated paged-attention problems: what the backends (the CPU reference and the CUDA
// kernels) receive. Every pointer is valid for its described extent, every dtype supported,
// outputs overlap no input. Backends neither re-validate nor throw for user errors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "common/views.h"
#include "rudnn/dtype.h"

#if defined(__CUDACC__)
#define RUDNN_PAGED_HD __host__ __device__ __forceinline__
#else
#define RUDNN_PAGED_HD inline
#endif

namespace rudnn::paged {

using common::BshdIn;
using common::BshdOut;

// The packed int32 metadata of a HostPlan (HostPlan::packed, uploaded by DevicePlan):
//   [0, Q)                    sequence id of each query
//   [Q, 2Q)                   position of each query
//   [2Q, 3Q)                  physical slot of each query (page · page_size + row)
//   [3Q, 3Q + S)              length of each sequence
//   [3Q + S, 3Q + 2S + 1)     offsets of each sequence's table in the flat tables
//   [.., + T)                 the flat tables
//   [.., + 3I)                work items: (sequence, first query, query count)
struct PackedLayout {
  int64_t queries = 0, sequences = 0, table_entries = 0, items = 0;
  int64_t seq_ids() const { return 0; }
  int64_t positions() const { return queries; }
  int64_t slots() const { return 2 * queries; }
  int64_t lengths() const { return 3 * queries; }
  int64_t table_offsets() const { return 3 * queries + sequences; }
  int64_t tables() const { return 3 * queries + 2 * sequences + 1; }
  int64_t item_table() const { return tables() + table_entries; }
  int64_t total() const { return item_table() + 3 * items; }
};

// Where the keys of each query are. Two forms: a DevicePlan's packed schedule, or spec 003's
// block tables (read on the device, every value clamped into range).
struct Schedule {
  int64_t page_size = 1;
  int page_shift = -1;  // log2(page_size) for powers of two, else -1
  int64_t pages = 0;  // physical pages (blocks) of the caches: the clamp of block ids
  int64_t items = 0;  // work items
  int max_item_queries = 0;

  // Plan form (block_form false).
  const int32_t* seq_ids = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* lengths = nullptr;
  const int32_t* table_offsets = nullptr;
  const int32_t* tables = nullptr;
  const int32_t* item_table = nullptr;

  // Block form: q [B, Hq, L, D]; tables [B, max_blocks], lengths [B], I32 or I64.
  bool block_form = false;
  const void* block_tables = nullptr;
  bool tables_i64 = false;
  const void* block_lengths = nullptr;
  bool lengths_i64 = false;
  int64_t batch = 0, len_q = 0, max_blocks = 0;
};

// A paged cache: key j's row of KV head hk at data + page · page_stride + row · row_stride +
// hk · head_stride (elements).
struct CacheView {
  const void* data = nullptr;
  int64_t page_stride = 0, row_stride = 0, head_stride = 0;
};

// One forward call: attention (dim_pos 0) or MLA (q·latent + qp·kp, values = latent).
// Query g of the packed list (plan form) or g = b · L + l (block form) is read at
// q.data + b · batch_stride + s · seq_stride + h · head_stride with (b, s) = (0, g) or (b, l).
struct PagedForward {
  DType dtype = DType::f32;
  Schedule sched;
  int64_t queries = 0, heads_q = 0, heads_kv = 0, dim_qk = 0, dim_pos = 0, dim_v = 0;
  BshdIn q, qp;  // qp: MLA only
  CacheView k, kp, v;
  BshdOut out;
  float scale = 1.0f;
  bool causal = true;
  int64_t max_keys = 0;  // the most keys a query sees (host bound; block form: the capacity)
  // Split history: splits > 1 writes FP32 records [queries · Hq, splits, record] to
  // `partials` (keys [s · split_keys, (s + 1) · split_keys) in partition s), then merges.
  int64_t splits = 1, split_keys = 0, record = 0;
  float* partials = nullptr;
  bool decode = false;  // run the decode kernel (decode_takes), else the general one
};

// A paged gradient cache, laid out like CacheView (written, never read).
struct CacheOut {
  void* data = nullptr;
  int64_t page_stride = 0, row_stride = 0, head_stride = 0;
};

// One backward call (spec 000 §11), plan form only: the forward's inputs in `fwd` (its `out`
// unused), the output gradient, and the gradients to write; a null `data` omits that output.
// dk / dv / dkp cover every physical page (pages no query reads get zeros; a page shared by
// sequences sums every reader's contribution). MLA (fwd.dim_pos > 0): fwd.v is fwd.k and
// dk is dlatent, holding both the key and the value contributions (dv unused).
struct PagedBackward {
  PagedForward fwd;
  BshdIn dout;
  BshdOut dq, dqp;
  CacheOut dk, dv, dkp;
};

// Cache writes: row t of `src` (heads × dim, contiguous rows of `dim`) to slot slots[t]
// (page slot / page_size, row slot % page_size) of `cache`; slots outside 0 .. pages ·
// page_size - 1 are skipped.
struct PagedWrite {
  DType dtype = DType::f32;
  int64_t tokens = 0, heads = 0, dim = 0, page_size = 1, pages = 0;
  const void* src = nullptr;  // [tokens, heads, dim] contiguous
  const void* slots = nullptr;
  DType slots_dtype = DType::i32;
  void* cache = nullptr;
  int64_t page_stride = 0, row_stride = 0, head_stride = 0;
};

// ---- Schedule lookups, shared by the reference and the kernels -----------------------------

// A work item: `count` consecutive queries (first .. first + count - 1) of one sequence.
struct Item {
  int64_t seq, first;
  int count;
};

RUDNN_PAGED_HD int64_t load_index(const void* data, bool i64, int64_t at) {
  return i64 ? static_cast<const int64_t*>(data)[at] : static_cast<const int32_t*>(data)[at];
}

RUDNN_PAGED_HD Item item_of(const Schedule& s, int64_t index) {
  if (!s.block_form) {
    const int32_t* it = s.item_table + 3 * index;
    return {it[0], it[1], it[2]};
  }
  const int64_t chunks = (s.len_q + s.max_item_queries - 1) / s.max_item_queries;
  const int64_t b = index / chunks, l0 = (index % chunks) * s.max_item_queries;
  const int64_t left = s.len_q - l0;
  return {b, b * s.len_q + l0, static_cast<int>(left < s.max_item_queries ? left : s.max_item_queries)};
}

RUDNN_PAGED_HD int64_t sequence_of(const Schedule& s, int64_t g) {
  return s.block_form ? g / s.len_q : s.seq_ids[g];
}

// Keys in sequence `seq` (block form: clamped to the table's capacity).
RUDNN_PAGED_HD int64_t sequence_keys(const Schedule& s, int64_t seq) {
  if (!s.block_form) return s.lengths[seq];
  const int64_t len = load_index(s.block_lengths, s.lengths_i64, seq);
  const int64_t cap = s.max_blocks * s.page_size;
  return len < 0 ? 0 : (len > cap ? cap : len);
}

// The number of keys query g (of sequence seq, whose length is len) sees: keys 0 .. n - 1.
RUDNN_PAGED_HD int64_t visible_keys(const Schedule& s, int64_t g, int64_t len, bool causal) {
  if (s.block_form) {
    const int64_t pos = len - s.len_q + g % s.len_q;
    return pos < 0 ? 0 : pos + 1;
  }
  return causal ? s.positions[g] + 1 : len;
}

// The physical page holding block `block` of sequence seq's table (clamped in the block form).
RUDNN_PAGED_HD int64_t page_of(const Schedule& s, int64_t seq, int64_t block) {
  if (!s.block_form) return s.tables[s.table_offsets[seq] + block];
  const int64_t id = load_index(s.block_tables, s.tables_i64, seq * s.max_blocks + block);
  return id < 0 ? 0 : (id >= s.pages ? s.pages - 1 : id);
}

// One sequence's page table (block form: its row of block_tables, read with clamping).
struct PageTable {
  const int32_t* plan;  // plan form
  const void* block;    // block form
};
RUDNN_PAGED_HD PageTable page_table(const Schedule& s, int64_t seq) {
  if (!s.block_form) return {s.tables + s.table_offsets[seq], nullptr};
  const int64_t bytes = s.tables_i64 ? 8 : 4;
  return {nullptr, static_cast<const char*>(s.block_tables) + seq * s.max_blocks * bytes};
}
RUDNN_PAGED_HD int64_t page_in(const Schedule& s, const PageTable& t, int block) {
  if (!s.block_form) return t.plan[block];
  const int64_t id = load_index(t.block, s.tables_i64, block);
  return id < 0 ? 0 : (id >= s.pages ? s.pages - 1 : id);
}
// Key j (below 2^31: histories and block-table capacities are bounded so) as (block, row)
// of its sequence's table, by a shift and a mask for power-of-two pages.
struct KeySlot {
  int block, row;
};
RUDNN_PAGED_HD KeySlot key_slot(const Schedule& s, int64_t j) {
  const int jj = static_cast<int>(j);
  if (s.page_shift >= 0) return {jj >> s.page_shift, jj & ((1 << s.page_shift) - 1)};
  const int ps = static_cast<int>(s.page_size);
  const int block = jj / ps;
  return {block, jj - block * ps};
}

// (batch, seq) coordinates of query g in the q / out views.
RUDNN_PAGED_HD int64_t query_offset(const Schedule& s, int64_t g, int64_t batch_stride,
                                    int64_t seq_stride) {
  if (!s.block_form) return g * seq_stride;
  return (g / s.len_q) * batch_stride + (g % s.len_q) * seq_stride;
}

// Query rows (query, head pairs) one block of the CUDA-core kernel holds: its register
// state per row grows with Dv.
inline int64_t rows_per_block(int64_t dim_v) { return dim_v <= 256 ? 4 : (dim_v <= 512 ? 2 : 1); }

// Keys per split partition are a multiple of this (four warps of 32-key tiles).
constexpr int64_t kSplitGranule = 128;

// Whether the bandwidth-built decode kernel takes a problem: one query per work item
// (decode schedules, or the block form with L = 1), attention (not MLA), D = Dv in
// {64, 128, 256} (256: 16-bit only, a row being at most 32 lanes of 16 bytes), Hq / Hkv in
// {1, 2, 4, 8}, and q, K, V rows on 16-byte boundaries.
inline bool decode_takes(const PagedForward& p) {
  const int64_t es = static_cast<int64_t>(dtype_size(p.dtype));
  if (p.dtype == DType::f64 || p.sched.max_item_queries != 1 || p.dim_pos != 0) return false;
  if (p.dim_qk != p.dim_v) return false;
  if (!(p.dim_qk == 64 || p.dim_qk == 128 || (p.dim_qk == 256 && es == 2))) return false;
  const int64_t group = p.heads_q / p.heads_kv;
  if (!(group == 1 || group == 2 || group == 4 || group == 8)) return false;
  auto aligned = [es](const void* data, std::initializer_list<int64_t> strides) {
    if (reinterpret_cast<uintptr_t>(data) % 16 != 0) return false;
    for (int64_t s : strides)
      if ((s * es) % 16 != 0) return false;
    return true;
  };
  return aligned(p.q.data, {p.q.batch_stride, p.q.seq_stride, p.q.head_stride}) &&
         aligned(p.k.data, {p.k.page_stride, p.k.row_stride, p.k.head_stride}) &&
         aligned(p.v.data, {p.v.page_stride, p.v.row_stride, p.v.head_stride});
}

// FP32 floats of one partial record: Dv values, the running max and sum, rounded up to 4.
inline int64_t record_floats(int64_t dim_v) { return (dim_v + 2 + 3) / 4 * 4; }

}  // namespace rudnn::paged
