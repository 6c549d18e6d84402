// Paged attention family: attention over a KV cache kept in fixed-size physical pages, for
// a packed batch of queries from sequences of different lengths (prefill chunks and decode
// steps in one call), multi-head / grouped-query attention and MLA (absorbed latent cache),
// split-history workspaces, cache writes, and spec 003's block-table form.
//
// Schedule (HostPlan). Sequence s keeps its keys in the physical pages tables[s][0], [1],
// ... (page_size keys each, key j of s in page tables[s][j / page_size], row
// j % page_size) and has lengths[s] keys. Query i belongs to sequence sequence_ids[i] and
// sits at the absolute, zero-based position positions[i] of it (its own key is already in
// the cache). Query i sees the keys 0 .. positions[i] (causal) or 0 .. lengths[s] - 1 (not
// causal). Pages may be shared between sequences (shared prefixes).
//
// Definition (every device), for query i of sequence s, head h, KV head hk = h / (Hq / Hkv):
//   x_j = scale · (q_ih · k_{s,j,hk})  over the keys j query i sees
//   out_ih = Σ_j softmax(x)_j v_{s,j,hk}
// A query that sees no key (only possible in the block-table form) gives a row of zeros.
// MLA: x_j = scale · (q_ih · latent_{s,j} + qp_ih · kp_{s,j}), out_ih = Σ_j p_j latent_{s,j}.
//
// Common contract of the DevicePlan calls:
// - Dtypes: q, caches and outputs share one dtype, F32, F16 or BF16 (F64 too on the CPU,
//   where the float64 reference runs). Products and the softmax accumulate in FP32 on the
//   GPU; outputs are rounded once.
// - Layout: q and the caches must be contiguous (a paged cache is one allocation whose
//   pages the kernels address directly; no copy is ever made). Outputs of the _into forms
//   must be contiguous and overlap no input.
// - Devices and streams: every tensor on the plan's device (else DeviceMismatch); every call
//   runs on the stream the plan was uploaded to (a SplitWorkspace made for another stream:
//   InvalidArgument). Nothing synchronises the host and no device value is read back:
//   every launch decision comes from the plan's host copy of the schedule and the shapes.
// - Inputs are never modified (paged_write_ writes the cache it is given; append writes a cache
//   in place only when the caller's handle is its storage's only one).
// - Errors: rudnn::Error naming the op, the argument and the rule, before anything is
//   written: metadata that does not validate, shapes that do not match the plan or each
//   other, Hq not a multiple of Hkv, D or Dv outside 1..1024, P outside 1..256, dtype /
//   device / stream mismatch, a non-finite or non-positive scale, overlapping outputs,
//   workspace budgets and workspace reuse with other shapes or another stream.
// Kernels (GPU), with an FP32 online softmax, page rows gathered through the table:
// - decode: schedules with one query per sequence (and the block form with L = 1), D = Dv in
//   {64, 128, 256} (256: F16/BF16), Hq / Hkv in {1, 2, 4, 8}, 16-byte aligned rows. One block
//   per (sequence, KV head, split) with all Hq / Hkv query heads of the KV head. F16 / BF16:
//   tensor cores (mma.sync, FP32 accumulation; the softmax probabilities enter p·v rounded to
//   the input type), each warp streaming its 16-key tiles through a cp.async pipeline of
//   shared memory (about 100 KiB per block). F32: CUDA cores, 16-byte loads, every load of a
//   warp's key tile in flight before its first use.
// - general: everything else (prefill chunks, mixed batches, MLA, any D, Dv, group): blocks
//   of up to 4 (query, head) rows of one sequence's run of queries and one KV head.
// Internal split (the calls without a workspace): when the unsplit grid has fewer blocks
// than 16 (decode kernel) or 2 (general kernel) per multiprocessor, the longest history is
// cut into the fewest partitions that reach that count, at most 32 and at least 256 keys
// each (a multiple of 128 keys), with FP32 partial records in a stream-ordered scratch
// allocation of queries · Hq · splits · (Dv + 2 rounded up to 4) floats and a merge pass.
// MLA with R = 512, P = 64 runs a tensor-core kernel (see mla). A tensor-core path for
// prefill (D in {64, 128, 256}) is not implemented yet: the general CUDA-core kernel runs it.
// Backward (spec 000 §11): attention_backward and mla_backward (and their _selected_into
// forms) run on the CPU only, as the float64 reference (probabilities recomputed per query
// row, no score matrix kept; F32/F16/BF16 inputs widened to float64 and every gradient
// rounded once; a float64 host accumulator per requested cache gradient, of its size). A GPU tensor
// gets rudnn::Error ErrorCode::Unsupported ("no CUDA kernel yet") after the argument checks
// and before anything is allocated or written. The _ordered_into forms take an
// OrderedBackwardWorkspace (below); on the CPU they compute exactly what the _selected_into
// forms compute, since the reference already reduces in a fixed order without atomics. Not
// implemented yet: the CUDA kernels (FP32 atomic history accumulation and the ordered one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "rudnn/stream.h"
#include "rudnn/tensor.h"

namespace rudnn::paged {

// Limits of the kernels.
constexpr int64_t kMaxPageSize = 256;
constexpr int64_t kMaxHeadDim = 1024;       // D and Dv (and MLA's R)
constexpr int64_t kMaxPositionalDim = 256;  // MLA's P
constexpr int64_t kMinSplits = 2, kMaxSplits = 32;
constexpr size_t kWorkspaceBudget = size_t{64} << 20;  // SplitWorkspace bytes at most
// Queries of one sequence that one work item (a block's row range) takes at most.
constexpr int64_t kItemQueries = 8;

// Host scheduling metadata, validated at construction (InvalidArgument naming the entry):
//   page_size in 1..256; pages >= 0 physical pages in the caches;
//   tables[s][k] in 0 .. pages - 1; lengths.size() == tables.size();
//   0 <= lengths[s] <= tables[s].size() · page_size (the table's capacity);
//   sequence_ids.size() == positions.size() (one entry per query);
//   0 <= sequence_ids[i] < tables.size(); 0 <= positions[i] < lengths[sequence_ids[i]];
//   every count and the flattened tables below 2^31 entries.
// The plan also records, for append, each query's physical slot (page · page_size + row) and
// whether two queries share one (shared-prefix pages can make them).
class HostPlan {
 public:
  HostPlan(int64_t page_size, int64_t pages, std::vector<std::vector<int64_t>> tables,
           std::vector<int64_t> lengths, std::vector<int64_t> sequence_ids,
           std::vector<int64_t> positions);

  int64_t page_size() const noexcept { return page_size_; }
  int64_t pages() const noexcept { return pages_; }
  int64_t sequences() const noexcept { return static_cast<int64_t>(lengths_.size()); }
  int64_t queries() const noexcept { return static_cast<int64_t>(positions_.size()); }
  // The most keys any query sees (causal: its position + 1; else its sequence's length).
  int64_t max_keys(bool causal) const noexcept { return causal ? max_causal_ : max_full_; }
  // Whether two queries write one physical slot (append refuses such a plan).
  bool duplicate_slots() const noexcept { return duplicate_slots_; }
  // The metadata as the kernels read it: one int32 array (see paged_attention/schedule.h).
  const std::vector<int32_t>& packed() const noexcept { return packed_; }
  // Work items (runs of consecutive queries of one sequence, at most kItemQueries each).
  int64_t items() const noexcept { return items_; }
  int64_t max_item_queries() const noexcept { return max_item_queries_; }

 private:
  int64_t page_size_, pages_;
  std::vector<int64_t> lengths_, positions_;
  int64_t max_causal_ = 0, max_full_ = 0;
  bool duplicate_slots_ = false;
  int64_t items_ = 0, max_item_queries_ = 0;
  std::vector<int32_t> packed_;
};

class SplitWorkspace;
class OrderedBackwardWorkspace;

// DevicePlan::append's result: the caches to keep using (the given ones written in place, or
// written copies of them where another handle shares their storage).
struct AppendResult {
  Tensor key_cache, value_cache;
};

// The gradients of DevicePlan::attention: dq [queries, Hq, D], dk [pages, page_size, Hkv, D]
// and dv [pages, page_size, Hkv, Dv], shaped like q and the caches, in q's dtype.
struct AttentionBackward {
  Tensor dq, dk, dv;
};
// The gradients of DevicePlan::mla: dq [queries, H, R], dqp [queries, H, P], dlatent
// [pages, page_size, 1, R] (the latent is both keys and values: both contributions summed)
// and dkp [pages, page_size, 1, P].
struct MlaBackward {
  Tensor dq, dqp, dlatent, dkp;
};

// A HostPlan on a device and stream. Reuse it only while the schedule is unchanged (a new
// schedule needs a new HostPlan and upload). Copies of a DevicePlan share its storage.
class DevicePlan {
 public:
  DevicePlan() = default;

  // Uploads `host` to q's device, on `stream` (default: current_stream of q's device), which
  // every later call must use. q is read for its device only. The host does not wait for
  // device work: the metadata is packed into pinned host memory (cudaHostAlloc) owned by the
  // plan and copied with cudaMemcpyAsync into a stream-ordered device allocation; the plan
  // keeps the pinned buffer until its last copy is destroyed, which waits for that copy
  // alone (an event). CUDA lists a pinned allocation among the calls that order work of
  // different streams queued around it (no overlap across it), so upload outside hot loops
  // and reuse the plan while the schedule holds; it cannot be captured in a CUDA graph.
  // On the CPU the plan holds the packed metadata in host memory.
  static DevicePlan upload(const HostPlan& host, const Tensor& q, const Stream& stream = {});

  bool defined() const noexcept { return state_ != nullptr; }
  // Device bytes the plan holds (the packed metadata).
  size_t bytes() const;
  Device device() const;
  const Stream& stream() const;
  const HostPlan& host() const;

  // Attention over the paged caches. q [queries, Hq, D], k_cache [pages, page_size, Hkv, D],
  // v_cache [pages, page_size, Hkv, Dv]; returns [queries, Hq, Dv] in q's dtype. Hq a
  // multiple of Hkv; D, Dv in 1..1024; scale finite and > 0. Long histories with few
  // blocks split the keys internally (see "Internal split" above); otherwise no scratch.
  Tensor attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, float scale,
                   bool causal) const;
  void attention_into(const Tensor& out, const Tensor& q, const Tensor& k_cache,
                      const Tensor& v_cache, float scale, bool causal) const;

  // MLA over a shared latent cache. q [queries, H, R], qp [queries, H, P], latent
  // [pages, page_size, 1, R], kp [pages, page_size, 1, P]; returns [queries, H, R]. R in
  // 1..1024, P in 1..256. `scale` is the model's QK scale. Same splitting rule as attention.
  // F16/BF16 with R = 512, P = 64 (DeepSeek) and 16-byte-aligned rows run a tensor-core
  // kernel (all H heads of a query share each latent row, so a tile of 64 keys is a GEMM;
  // FP32 logits and softmax, probabilities rounded to the input dtype for P·V, as
  // FlashAttention does): warpgroup MMAs on sm_90a builds on Hopper, mma.sync elsewhere when
  // the device grants its 226 KiB of shared memory per block (sm_90), else the general
  // CUDA-core kernel. Its internal split fills the multiprocessors with one block each.
  Tensor mla(const Tensor& q, const Tensor& qp, const Tensor& latent, const Tensor& kp,
             float scale, bool causal) const;
  void mla_into(const Tensor& out, const Tensor& q, const Tensor& qp, const Tensor& latent,
                const Tensor& kp, float scale, bool causal) const;

  // Backward of attention(q, k_cache, v_cache, scale, causal) for the upstream gradient
  // grad_out [queries, Hq, Dv] (q's dtype, contiguous, on the plan's device). Shapes, dtypes
  // and scale follow attention's rules; errors as in the common contract, before anything is
  // written. Cache gradients cover every physical page: a page no query reads gets zeros, a
  // page shared by several sequences (a shared prefix) sums the gradients of all its readers,
  // and GQA sums the Hq / Hkv query heads of each KV head. CPU only (see "Backward" above):
  // returns new tensors; scratch: float64 host buffers of dk's and dv's element counts.
  // GPU tensors: ErrorCode::Unsupported.
  AttentionBackward attention_backward(const Tensor& q, const Tensor& k_cache,
                                       const Tensor& v_cache, const Tensor& grad_out,
                                       float scale, bool causal) const;
  // The same into the caller's buffers, each independently optional: an undefined tensor
  // omits that gradient with its accumulation and scratch (the inputs are still read as the
  // other gradients need them). A defined one must have the shape and dtype that
  // attention_backward returns, be contiguous and on the plan's device, and overlap no input
  // (q, caches, grad_out) and no other output (InvalidArgument naming both). Every element
  // of a given output is written. Not atomics-based on the CPU: deterministic.
  void attention_backward_selected_into(const AttentionBackward& grads, const Tensor& q,
                                        const Tensor& k_cache, const Tensor& v_cache,
                                        const Tensor& grad_out, float scale, bool causal) const;

  // Backward of mla(q, qp, latent, kp, scale, causal) for grad_out [queries, H, R]: dq, dqp,
  // dlatent (key and value contributions) and dkp, with attention_backward's rules (and its
  // _selected_into form's: undefined outputs omitted, no aliasing).
  MlaBackward mla_backward(const Tensor& q, const Tensor& qp, const Tensor& latent,
                           const Tensor& kp, const Tensor& grad_out, float scale,
                           bool causal) const;
  void mla_backward_selected_into(const MlaBackward& grads, const Tensor& q, const Tensor& qp,
                                  const Tensor& latent, const Tensor& kp, const Tensor& grad_out,
                                  float scale, bool causal) const;

  // The atomic-free ordered backward: the _selected_into forms' rules (shapes, dtypes,
  // optional outputs, no aliasing, errors before anything is written) plus the workspace's:
  // it must have been made for a compatible plan (the same scheduling metadata: page size,
  // physical pages and packed schedule), for q's query and head counts, on the plan's device
  // and stream (else InvalidArgument naming what differs), and no output may overlap its
  // storage. On the CPU the result is bit for bit the _selected_into forms' (the float64
  // reference is atomic-free and fixed-order); the workspace's options are recorded for the
  // GPU kernels and change nothing there. A fixed order promises neither equal bits across
  // devices nor equality with the atomic path. GPU tensors: ErrorCode::Unsupported after the
  // checks (no CUDA kernel yet), nothing written.
  void attention_backward_ordered_into(OrderedBackwardWorkspace& workspace,
                                       const AttentionBackward& grads, const Tensor& q,
                                       const Tensor& k_cache, const Tensor& v_cache,
                                       const Tensor& grad_out, float scale, bool causal) const;
  void mla_backward_ordered_into(OrderedBackwardWorkspace& workspace, const MlaBackward& grads,
                                 const Tensor& q, const Tensor& qp, const Tensor& latent,
                                 const Tensor& kp, const Tensor& grad_out, float scale,
                                 bool causal) const;

  // The same with a caller's split workspace: exactly workspace.splits() partitions of the
  // longest history (FP32 partial results, merged in partition order), no allocation. The
  // workspace must have been made for this call's (queries, heads, value_dim), on the plan's
  // device and stream (else InvalidArgument naming what differs).
  Tensor attention_with_workspace(SplitWorkspace& workspace, const Tensor& q,
                                  const Tensor& k_cache, const Tensor& v_cache, float scale,
                                  bool causal) const;
  Tensor mla_with_workspace(SplitWorkspace& workspace, const Tensor& q, const Tensor& qp,
                            const Tensor& latent, const Tensor& kp, float scale,
                            bool causal) const;

  // Writes query i's new key k[i] and value v[i] (k [queries, Hkv, D], v [queries, Hkv, Dv])
  // at its position's slot of key_cache / value_cache ([pages, page_size, Hkv, D|Dv]) on the
  // plan's stream, and returns the caches to keep. A cache the caller holds alone (its
  // storage_handles() is 1) is written in place and returned; a cache whose storage another
  // handle or view also reaches is copied first (a contiguous copy on the plan's stream,
  // the cache's bytes once more), the copy written and returned, and the other handles keep
  // the old contents. Memory wrapped with from_blob (DLPack imports: torch, numpy) counts
  // only ruDNN's handles, so such a cache is written in place. A plan where two queries share
  // a slot is refused (InvalidArgument: "duplicate physical writes"). k/v must not overlap
  // the caches.
  AppendResult append(const Tensor& k, const Tensor& v, const Tensor& key_cache,
                      const Tensor& value_cache) const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// FP32 partial results of split-history calls: [queries · heads, splits, value_dim + 2
// rounded up to 4] floats, allocated on q's device and stream (default: current stream),
// splits in 2..32, at most 64 MiB (else InvalidArgument naming the bytes). Reusable for any
// number of calls with the same (queries, heads, value_dim) on the same stream.
class SplitWorkspace {
 public:
  SplitWorkspace(const Tensor& q, int64_t queries, int64_t heads, int64_t value_dim,
                 int64_t splits, const Stream& stream = {});
  int64_t queries() const noexcept { return queries_; }
  int64_t heads() const noexcept { return heads_; }
  int64_t value_dim() const noexcept { return value_dim_; }
  int64_t splits() const noexcept { return splits_; }
  size_t bytes() const noexcept { return bytes_; }
  const Stream& stream() const noexcept { return stream_; }
  const Tensor& storage() const noexcept { return storage_; }

 private:
  int64_t queries_, heads_, value_dim_, splits_;
  size_t bytes_;
  Stream stream_;
  Tensor storage_;
};

// State of the atomic-free ordered backward (spec 000 §11), made for a DevicePlan and the q
// it will be used with: records q's query and head counts ([queries, heads, D] rank 3, the
// plan's query count, else InvalidArgument), the plan's device and stream and a copy of its
// host scheduling metadata (reuse needs identical metadata: the compaction index describes
// it). Options (recorded for the GPU kernels; the CPU reference ignores them):
// - query pruning (default on): skip queries causally invisible to a history row, keeping
//   the surviving summation order;
// - history row cache (default off): keep history-row values in thread-local storage;
// - history compaction (default off): compute history gradients only for active physical
//   pages (those reachable through the lengths of sequences that have queries: not table
//   capacity, not sequences without queries, not nonzero gradients) and zero the others.
//   The first enable builds an int32 index of physical_pages entries (4 bytes each: the
//   page's rank among active pages, -1 if inactive) on the plan's device and stream; later
//   toggles reuse it and disabling keeps it (bytes() counts it).
// Environment, read once at construction (later changes do not affect the workspace):
// RUDA_PAGED_ORDERED_CACHE_ROWS and RUDA_PAGED_ORDERED_COMPACT_HISTORY select the row cache
// and compaction: unset or "0" off, "1" on, any other value InvalidArgument naming the
// variable and the value. All storage (statistics and inverse metadata of the kernels, the
// compaction index) shares kWorkspaceBudget (64 MiB); the CPU holds only the index. Not
// thread-safe: one workspace per ordered stream of calls.
class OrderedBackwardWorkspace {
 public:
  OrderedBackwardWorkspace(const DevicePlan& plan, const Tensor& q);

  void set_query_pruning(bool on) noexcept { query_pruning_ = on; }
  bool query_pruning() const noexcept { return query_pruning_; }
  void set_history_row_cache(bool on) noexcept { history_row_cache_ = on; }
  bool history_row_cache() const noexcept { return history_row_cache_; }
  // Enabling builds the index if none exists yet; an index over the budget (physical_pages ·
  // 4 bytes > 64 MiB) is InvalidArgument naming the bytes, and then the previous mode and
  // bytes() are unchanged. Disabling never fails and keeps the index.
  void set_history_compaction(bool on);
  bool history_compaction() const noexcept { return history_compaction_; }
  // (active pages, inactive pages) while compaction is on; their sum is the plan's
  // physical pages. std::nullopt while it is off.
  std::optional<std::pair<int64_t, int64_t>> history_compaction_pages() const;
  // Bytes of device (CPU: host) storage held, retained index included.
  size_t bytes() const noexcept;

  int64_t queries() const noexcept { return queries_; }
  int64_t heads() const noexcept { return heads_; }
  Device device() const noexcept { return device_; }
  const Stream& stream() const noexcept { return stream_; }
  int64_t page_size() const noexcept { return page_size_; }
  int64_t pages() const noexcept { return pages_; }
  // The plan's packed metadata it was made for (HostPlan::packed).
  const std::vector<int32_t>& schedule() const noexcept { return schedule_; }
  // The compaction index (undefined until compaction was first enabled).
  const Tensor& storage() const noexcept { return index_; }

 private:
  int64_t queries_ = 0, heads_ = 0, page_size_ = 1, pages_ = 0, sequences_ = 0;
  Device device_;
  Stream stream_;
  std::vector<int32_t> schedule_;
  bool query_pruning_ = true, history_row_cache_ = false, history_compaction_ = false;
  bool index_built_ = false;
  int64_t active_pages_ = 0;
  Tensor index_;
};

// ---------------------------------------------------------------------------------------
// Spec 003's block-table form.
//
// paged_attention: q [B, Hq, L, D], k_cache [blocks, Hkv, block_size, D], v_cache
// [blocks, Hkv, block_size, Dv], block_tables [B, max_blocks] and lengths [B] (I32 or I64,
// contiguous, on q's device; read on the device only). Query l of sequence b sees the keys
// 0 ..= lengths[b] - L + l (causal at the end); key j in block block_tables[b][j /
// block_size], row j % block_size. Block ids are clamped to 0 .. blocks - 1 and lengths to
// 0 .. max_blocks · block_size on every device, so no value can make a read leave the
// caches; a query that then sees no key gives zeros. Returns [B, Hq, L, Dv]. Same dtypes,
// head limits and scale rule as above; block_size 1..256; blocks >= 1 unless B · L = 0.
Tensor paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const Tensor& block_tables, const Tensor& lengths, float scale,
                       const Stream& stream = {});
// paged_attention writing `out` (contiguous [B, Hq, L, Dv] in q's dtype, sharing no memory
// with an input; else an Error naming "out" before anything is written).
void paged_attention_into(const Tensor& out, const Tensor& q, const Tensor& k_cache,
                          const Tensor& v_cache, const Tensor& block_tables,
                          const Tensor& lengths, float scale, const Stream& stream = {});

// paged_write: cache [blocks, Hkv, block_size, D] with new [T, Hkv, D] written at slots
// [T] (I32 or I64): slot t is block slots[t] / block_size, row slots[t] % block_size.
// Out-of-range slots (negative or >= blocks · block_size) are skipped. Slots must be
// distinct: on the CPU duplicates are InvalidArgument; on the GPU (where they are not read
// back) which write lands is unspecified. paged_write returns a new cache (a copy with the
// writes); paged_write_ writes into `cache` in place.
Tensor paged_write(const Tensor& cache, const Tensor& new_values, const Tensor& slots,
                   const Stream& stream = {});
void paged_write_(const Tensor& cache, const Tensor& new_values, const Tensor& slots,
                  const Stream& stream = {});

}  // namespace rudnn::paged
