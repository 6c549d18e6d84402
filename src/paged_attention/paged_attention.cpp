// The paged family's entry points: HostPlan validation, DevicePlan upload, and the calls
// (validation once, into a problem struct, then the reference or the CUDA backend).
#include "rudnn/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

#include "common/op_call.h"
#include "common/views.h"
#include "core/check.h"
#include "core/strided.h"
#include "paged_attention/problem.h"
#include "paged_attention/reference.h"

#if RUDNN_WITH_CUDA
#include "cuda/device_info.h"
#include "paged_attention/cuda/launch.h"
#include "paged_attention/cuda/mla_tc.h"
#include "paged_attention/cuda/tuning.h"
#endif

namespace rudnn::paged {

using common::OpCall;
using detail::cat;
using detail::fail;

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr const char* kHostPlanOp = "paged_attention::HostPlan";

// The internal split of a long history (no workspace): the fewest keys a partition may hold
// (the blocks wanted per multiprocessor are in cuda/tuning.h).
constexpr int64_t kMinSplitKeys = 256;

void check_count(const char* what, int64_t n) {
  if (n > kInt32Max) {
    fail(ErrorCode::InvalidArgument,
         cat(kHostPlanOp, ": ", what, " has ", n, " entries; expected fewer than 2^31"));
  }
}

}  // namespace

// ---- HostPlan -------------------------------------------------------------------------------

HostPlan::HostPlan(int64_t page_size, int64_t pages, std::vector<std::vector<int64_t>> tables,
                   std::vector<int64_t> lengths, std::vector<int64_t> sequence_ids,
                   std::vector<int64_t> positions)
    : page_size_(page_size), pages_(pages) {
  const char* op = kHostPlanOp;
  if (page_size < 1 || page_size > kMaxPageSize) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": page_size is ", page_size, "; expected 1 <= page_size <= ", kMaxPageSize));
  }
  if (pages < 0 || pages * page_size > kInt32Max) {
    fail(ErrorCode::InvalidArgument, cat(op, ": pages is ", pages, "; expected 0 <= pages and ",
                                         "pages * page_size < 2^31 physical rows"));
  }
  if (lengths.size() != tables.size()) {
    fail(ErrorCode::InvalidArgument, cat(op, ": lengths has ", lengths.size(), " entries, tables ",
                                         tables.size(), "; expected one length per sequence"));
  }
  if (sequence_ids.size() != positions.size()) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": sequence_ids has ", sequence_ids.size(), " entries, positions ",
             positions.size(), "; expected one of each per query"));
  }
  const int64_t seqs = static_cast<int64_t>(tables.size());
  const int64_t queries = static_cast<int64_t>(positions.size());
  check_count("tables", seqs);
  check_count("positions", queries);
  int64_t entries = 0;
  for (int64_t s = 0; s < seqs; ++s) {
    const auto& table = tables[static_cast<size_t>(s)];
    for (size_t k = 0; k < table.size(); ++k) {
      if (table[k] < 0 || table[k] >= pages) {
        fail(ErrorCode::InvalidArgument,
             cat(op, ": tables[", s, "][", k, "] is ", table[k],
                 ", not a page; expected 0 <= page < pages = ", pages));
      }
    }
    entries += static_cast<int64_t>(table.size());
    check_count("the flattened tables", entries);
    const int64_t capacity = static_cast<int64_t>(table.size()) * page_size;
    const int64_t len = lengths[static_cast<size_t>(s)];
    if (len < 0 || len > capacity) {
      fail(ErrorCode::InvalidArgument,
           cat(op, ": lengths[", s, "] is ", len, "; expected 0 <= length <= the table's capacity ",
               table.size(), " pages * ", page_size, " = ", capacity));
    }
  }
  std::vector<int64_t> slots(static_cast<size_t>(queries));
  for (int64_t i = 0; i < queries; ++i) {
    const int64_t s = sequence_ids[static_cast<size_t>(i)];
    if (s < 0 || s >= seqs) {
      fail(ErrorCode::InvalidArgument, cat(op, ": sequence_ids[", i, "] is ", s,
                                           "; expected 0 <= id < sequences = ", seqs));
    }
    const int64_t pos = positions[static_cast<size_t>(i)];
    const int64_t len = lengths[static_cast<size_t>(s)];
    if (pos < 0 || pos >= len) {
      fail(ErrorCode::InvalidArgument,
           cat(op, ": positions[", i, "] is ", pos, "; expected an absolute zero-based position ",
               "0 <= position < lengths[", s, "] = ", len));
    }
    const int64_t page = tables[static_cast<size_t>(s)][static_cast<size_t>(pos / page_size)];
    slots[static_cast<size_t>(i)] = page * page_size + pos % page_size;
    max_causal_ = std::max(max_causal_, pos + 1);
    max_full_ = std::max(max_full_, len);
  }
  std::vector<int64_t> sorted = slots;
  std::sort(sorted.begin(), sorted.end());
  duplicate_slots_ = std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end();

  // Work items: runs of consecutive queries of one sequence, at most kItemQueries long.
  std::vector<int32_t> item_table;
  for (int64_t i = 0; i < queries;) {
    const int64_t s = sequence_ids[static_cast<size_t>(i)];
    int64_t n = 1;
    while (i + n < queries && n < kItemQueries && sequence_ids[static_cast<size_t>(i + n)] == s) ++n;
    item_table.insert(item_table.end(), {static_cast<int32_t>(s), static_cast<int32_t>(i),
                                         static_cast<int32_t>(n)});
    max_item_queries_ = std::max(max_item_queries_, n);
    ++items_;
    i += n;
  }

  PackedLayout layout{queries, seqs, entries, items_};
  check_count("the packed metadata", layout.total());
  packed_.assign(static_cast<size_t>(layout.total()), 0);
  for (int64_t i = 0; i < queries; ++i) {
    packed_[static_cast<size_t>(layout.seq_ids() + i)] =
        static_cast<int32_t>(sequence_ids[static_cast<size_t>(i)]);
    packed_[static_cast<size_t>(layout.positions() + i)] =
        static_cast<int32_t>(positions[static_cast<size_t>(i)]);
    packed_[static_cast<size_t>(layout.slots() + i)] = static_cast<int32_t>(slots[static_cast<size_t>(i)]);
  }
  int64_t offset = 0;
  for (int64_t s = 0; s < seqs; ++s) {
    packed_[static_cast<size_t>(layout.lengths() + s)] =
        static_cast<int32_t>(lengths[static_cast<size_t>(s)]);
    packed_[static_cast<size_t>(layout.table_offsets() + s)] = static_cast<int32_t>(offset);
    for (int64_t page : tables[static_cast<size_t>(s)]) {
      packed_[static_cast<size_t>(layout.tables() + offset)] = static_cast<int32_t>(page);
      ++offset;
    }
  }
  packed_[static_cast<size_t>(layout.table_offsets() + seqs)] = static_cast<int32_t>(offset);
  std::copy(item_table.begin(), item_table.end(),
            packed_.begin() + static_cast<std::ptrdiff_t>(layout.item_table()));
  lengths_ = std::move(lengths);
  positions_ = std::move(positions);
}

// ---- DevicePlan -----------------------------------------------------------------------------

struct DevicePlan::State {
  HostPlan host;
  Device device;
  Stream stream;
  Tensor meta;                   // the packed metadata (int32) on the device
  std::shared_ptr<void> staging;  // the pinned upload buffer (CUDA)
  PackedLayout layout;
};

DevicePlan DevicePlan::upload(const HostPlan& host, const Tensor& q, const Stream& stream) {
  OpCall call("paged_attention::DevicePlan::upload", "q", q, stream);
  const std::vector<int32_t>& packed = host.packed();
  const int64_t n = static_cast<int64_t>(packed.size());
  auto state = std::make_shared<State>(State{host, call.device, call.stream, Tensor{}, nullptr, {}});
  int64_t entries = 0;
  state->layout = PackedLayout{host.queries(), host.sequences(), 0, host.items()};
  entries = n - 3 * host.queries() - 2 * host.sequences() - 1 - 3 * host.items();
  state->layout.table_entries = entries;
  if (call.device.is_cpu()) {
    state->meta = Tensor::from_host(packed, {n});
  } else {
#if RUDNN_WITH_CUDA
    state->meta = call.empty({n}, DType::i32);
    state->staging = cuda::upload_pinned(packed.data(), packed.size(), state->meta.data(), call.stream);
#else
    fail(ErrorCode::Unsupported, cat(call.op, ": ruDNN was built without CUDA"));
#endif
  }
  DevicePlan plan;
  plan.state_ = std::move(state);
  return plan;
}

namespace {

const DevicePlan::State& require_plan(const std::shared_ptr<DevicePlan::State>& st, const char* op) {
  if (!st) fail(ErrorCode::InvalidArgument, cat(op, ": the DevicePlan is undefined (use upload)"));
  return *st;
}

}  // namespace

size_t DevicePlan::bytes() const {
  const State& st = require_plan(state_, "paged_attention::DevicePlan::bytes");
  return static_cast<size_t>(st.meta.numel()) * sizeof(int32_t);
}
Device DevicePlan::device() const {
  return require_plan(state_, "paged_attention::DevicePlan::device").device;
}
const Stream& DevicePlan::stream() const {
  return require_plan(state_, "paged_attention::DevicePlan::stream").stream;
}
const HostPlan& DevicePlan::host() const {
  return require_plan(state_, "paged_attention::DevicePlan::host").host;
}

// ---- SplitWorkspace -------------------------------------------------------------------------

SplitWorkspace::SplitWorkspace(const Tensor& q, int64_t queries, int64_t heads, int64_t value_dim,
                               int64_t splits, const Stream& stream)
    : queries_(queries), heads_(heads), value_dim_(value_dim), splits_(splits), bytes_(0) {
  OpCall call("paged_attention::SplitWorkspace", "q", q, stream);
  if (queries < 0 || heads < 1) {
    fail(ErrorCode::InvalidArgument, cat(call.op, ": queries = ", queries, ", heads = ", heads,
                                         "; expected queries >= 0 and heads >= 1"));
  }
  if (value_dim < 1 || value_dim > kMaxHeadDim) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": value_dim is ", value_dim, "; expected 1 <= value_dim <= ", kMaxHeadDim));
  }
  if (splits < kMinSplits || splits > kMaxSplits) {
    fail(ErrorCode::InvalidArgument, cat(call.op, ": splits is ", splits, "; expected ", kMinSplits,
                                         " <= splits <= ", kMaxSplits));
  }
  // Each factor is bounded before the product so that the product cannot overflow.
  const int64_t rows = queries <= (int64_t{1} << 40) / heads ? queries * heads : -1;
  const double want = static_cast<double>(queries) * static_cast<double>(heads) *
                      static_cast<double>(splits) *
                      static_cast<double>(record_floats(value_dim)) * 4.0;
  if (rows < 0 || want > static_cast<double>(kWorkspaceBudget)) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": ", queries, " queries * ", heads, " heads * ", splits, " splits * ",
             record_floats(value_dim), " floats need ", want, " bytes; the budget is ",
             kWorkspaceBudget, " bytes (64 MiB)"));
  }
  bytes_ = static_cast<size_t>(rows * splits * record_floats(value_dim)) * sizeof(float);
  stream_ = call.stream;
  storage_ = call.empty({static_cast<int64_t>(bytes_ / sizeof(float))}, DType::f32);
}

// ---- OrderedBackwardWorkspace ---------------------------------------------------------------

namespace {

// An environment switch: unset or "0" off, "1" on, anything else an error naming both.
bool env_switch(const char* op, const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || std::strcmp(value, "0") == 0) return false;
  if (std::strcmp(value, "1") == 0) return true;
  fail(ErrorCode::InvalidArgument, cat(op, ": environment variable ", name, " is \"", value,
                                       "\"; expected unset, \"0\" (off) or \"1\" (on)"));
}

}  // namespace

OrderedBackwardWorkspace::OrderedBackwardWorkspace(const DevicePlan& plan, const Tensor& q) {
  const char* op = "paged_attention::OrderedBackwardWorkspace";
  const HostPlan& host = plan.host();  // InvalidArgument for an undefined plan
  OpCall call(op, "q", q, plan.stream());
  if (call.device != plan.device()) {
    fail(ErrorCode::DeviceMismatch,
         cat(op, ": q is on ", call.device.str(), ", the plan on ", plan.device().str()));
  }
  if (q.dim() != 3 || q.size(0) != host.queries()) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": q is ", shape_str(q.shape()), "; expected [queries, heads, dim] with the ",
             "plan's ", host.queries(), " queries"));
  }
  queries_ = q.size(0);
  heads_ = q.size(1);
  device_ = call.device;
  stream_ = call.stream;
  page_size_ = host.page_size();
  pages_ = host.pages();
  sequences_ = host.sequences();
  schedule_ = host.packed();
  // Read once: a later change of the environment leaves this workspace as it is.
  history_row_cache_ = env_switch(op, "RUDA_PAGED_ORDERED_CACHE_ROWS");
  if (env_switch(op, "RUDA_PAGED_ORDERED_COMPACT_HISTORY")) set_history_compaction(true);
}

void OrderedBackwardWorkspace::set_history_compaction(bool on) {
  if (!on || index_built_) {
    history_compaction_ = on;
    return;
  }
  const char* op = "paged_attention::OrderedBackwardWorkspace::set_history_compaction";
  // Nothing else is held yet on the CPU, so the index alone meets the budget.
  const double want = static_cast<double>(pages_) * sizeof(int32_t);
  if (want > static_cast<double>(kWorkspaceBudget - bytes())) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": the compaction index of ", pages_, " physical pages * 4 bytes needs ", want,
             " bytes; with the ", bytes(), " bytes held the budget is ", kWorkspaceBudget,
             " bytes (64 MiB); compaction stays off"));
  }
  // Active pages: those inside the lengths of sequences that have queries (packed layout,
  // see paged_attention/problem.h).
  const int64_t nq = queries_, ns = sequences_;
  const PackedLayout layout{nq, ns, 0, 0};
  std::vector<char> has_query(static_cast<size_t>(ns), 0);
  for (int64_t i = 0; i < nq; ++i)
    has_query[static_cast<size_t>(schedule_[static_cast<size_t>(layout.seq_ids() + i)])] = 1;
  std::vector<int32_t> index(static_cast<size_t>(pages_), -1);
  for (int64_t seq = 0; seq < ns; ++seq) {
    if (!has_query[static_cast<size_t>(seq)]) continue;
    const int64_t len = schedule_[static_cast<size_t>(layout.lengths() + seq)];
    const int64_t first = schedule_[static_cast<size_t>(layout.table_offsets() + seq)];
    for (int64_t k = 0; k < (len + page_size_ - 1) / page_size_; ++k)
      index[static_cast<size_t>(schedule_[static_cast<size_t>(layout.tables() + first + k)])] = 0;
  }
  int32_t rank = 0;
  for (int32_t& e : index)
    if (e == 0) e = rank++;
  // Assigned only once built: a failed allocation leaves the mode and bytes() unchanged.
  index_ = Tensor::from_host(index, {pages_}, device_, stream_);
  active_pages_ = rank;
  index_built_ = true;
  history_compaction_ = true;
}

std::optional<std::pair<int64_t, int64_t>> OrderedBackwardWorkspace::history_compaction_pages()
    const {
  if (!history_compaction_) return std::nullopt;
  return std::pair<int64_t, int64_t>{active_pages_, pages_ - active_pages_};
}

size_t OrderedBackwardWorkspace::bytes() const noexcept {
  return index_built_ ? static_cast<size_t>(pages_) * sizeof(int32_t) : 0;
}

// ---- Forward --------------------------------------------------------------------------------

namespace {

void require_contiguous(const OpCall& call, const char* name, const Tensor& t) {
  if (!t.is_contiguous()) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": ", name, " must be contiguous (caches are addressed page by page, ",
             "queries row by row); got strides ", shape_str(t.strides())));
  }
}

void require_rank(const OpCall& call, const char* name, const Tensor& t, int64_t rank,
                  const char* what) {
  if (t.dim() != rank) {
    fail(ErrorCode::ShapeMismatch,
         cat(call.op, ": ", name, " has shape ", shape_str(t.shape()), "; expected ", what));
  }
}

void require_same_dtype(const OpCall& call, const char* name, const Tensor& t, const Tensor& q) {
  common::require_float(call, name, t);
  if (t.dtype() != q.dtype()) {
    fail(ErrorCode::DTypeMismatch, cat(call.op, ": ", name, " has dtype ", dtype_name(t.dtype()),
                                       ", q has ", dtype_name(q.dtype()), "; they must match"));
  }
}

void require_dim(const OpCall& call, const char* what, int64_t value, int64_t most) {
  if (value < 1 || value > most) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": ", what, " is ", value, "; expected 1 <= ", what, " <= ", most));
  }
}

// A contiguous [queries, H, D] tensor (or [B, H, L, D] seen through bhsd strides) as a view.
BshdIn rows3_in(const Tensor& t) {
  BshdIn v;
  v.data = t.data();
  v.batch_stride = 0;
  v.head_stride = t.size(2);
  v.seq_stride = t.size(1) * t.size(2);
  return v;
}
BshdOut rows3_out(const Tensor& t) {
  BshdOut v;
  v.data = t.data();
  v.batch_stride = 0;
  v.head_stride = t.size(2);
  v.seq_stride = t.size(1) * t.size(2);
  return v;
}

// A contiguous [pages, page_size, heads, dim] cache.
CacheView plan_cache(const Tensor& t) {
  return {t.data(), t.size(1) * t.size(2) * t.size(3), t.size(2) * t.size(3), t.size(3)};
}
// A contiguous [blocks, heads, block_size, dim] cache.
CacheView block_cache(const Tensor& t) {
  return {t.data(), t.size(1) * t.size(2) * t.size(3), t.size(3), t.size(2) * t.size(3)};
}

void require_out_contiguous(const OpCall& call, const Tensor& out, const Shape& shape, DType dtype,
                            std::initializer_list<std::pair<const char*, const Tensor*>> inputs) {
  common::require_out(call, "out", out, shape, dtype);
  require_contiguous(call, "out", out);
  common::require_no_overlap(call, "out", out, inputs);
}

#if RUDNN_WITH_CUDA
// The internal split of the tensor-core MLA kernel (one block per multiprocessor: its shared
// memory): the fewest partitions whose waves of blocks take the least time, counting a
// wave's time by its blocks' keys; a partition holds at least kMinSplitKeys keys. B64 H128
// (128 blocks on 132 multiprocessors) stays unsplit; short batches split to fill the device.
int64_t mla_tc_splits(const PagedForward& p, int64_t multiprocessors) {
  const int64_t blocks = p.sched.items * cuda::mla_tc_row_tiles(p);
  if (blocks <= 0 || multiprocessors <= 0) return 1;
  const int64_t most =
      std::min(kMaxSplits, std::max<int64_t>(1, (p.max_keys + kMinSplitKeys - 1) / kMinSplitKeys));
  int64_t best = 1;
  double best_time = static_cast<double>((blocks + multiprocessors - 1) / multiprocessors);
  for (int64_t s = 2; s <= most; ++s) {
    const double time =
        static_cast<double>((blocks * s + multiprocessors - 1) / multiprocessors) / s;
    // A split adds the merge pass: take one only for a clear gain.
    if (time < 0.85 * best_time) {
      best = s;
      best_time = time;
    }
  }
  return best;
}
#endif

// Picks the split of the history (none, internal scratch, or the caller's workspace) and runs.
void run_forward(OpCall& call, PagedForward& p, SplitWorkspace* workspace) {
  const int64_t rows = p.queries * p.heads_q;
  if (rows == 0 || p.dim_v == 0) return;
#if RUDNN_WITH_CUDA
  p.decode = !call.device.is_cpu() && cuda::kernel_tuning().decode_kernel && decode_takes(p);
#endif
  if (workspace != nullptr) {
    p.splits = workspace->splits();
    p.split_keys = std::max<int64_t>(
        kSplitGranule, (p.max_keys + p.splits - 1) / p.splits + kSplitGranule - 1) /
        kSplitGranule * kSplitGranule;
    p.record = record_floats(p.dim_v);
    p.partials = static_cast<float*>(workspace->storage().data());
  } else if (!call.device.is_cpu() && p.max_keys > 0) {
#if RUDNN_WITH_CUDA
    // The decode kernel's blocks are short (a split each), so it asks for more of them: a
    // few waves keep the last one's idle tail small.
    const int64_t group = p.heads_q / p.heads_kv;
    const int64_t tiles =
        p.decode ? 1
                 : (group * p.sched.max_item_queries + rows_per_block(p.dim_v) - 1) /
                       rows_per_block(p.dim_v);
    // The tensor-core decode kernel may take several KV heads per block.
    const int64_t heads = p.decode && dtype_size(p.dtype) == 2 &&
                                  cuda::kernel_tuning().decode_tensor_cores
                              ? cuda::tc_decode_heads(cuda::kernel_tuning(), p.heads_kv)
                              : 1;
    const int64_t blocks = p.sched.items * (p.heads_kv / heads) * tiles;
    const int64_t per_sm = p.decode ? cuda::kernel_tuning().decode_blocks_per_sm
                                     : cuda::kernel_tuning().general_blocks_per_sm;
    const int64_t target = per_sm * int64_t{rudnn::cuda::device_info(call.device).multiprocessors};
    int64_t splits = 1;
    const int64_t waves = p.decode ? cuda::kernel_tuning().decode_waves : 0;
    if (cuda::mla_tc_takes(p) && cuda::mla_tc_usable(call.stream)) {
      splits = mla_tc_splits(p, rudnn::cuda::device_info(call.device).multiprocessors);
    } else if (waves > 0) {
      const int64_t slots = waves * cuda::kernel_tuning().decode_resident *
                            int64_t{rudnn::cuda::device_info(call.device).multiprocessors};
      splits = std::max<int64_t>(1, std::min({kMaxSplits, slots / blocks,
                                              (p.max_keys + kMinSplitKeys - 1) / kMinSplitKeys}));
    } else if (blocks < target) {
      splits = std::min({kMaxSplits, (target + blocks - 1) / blocks,
                         (p.max_keys + kMinSplitKeys - 1) / kMinSplitKeys});
    }
    if (splits > 1) {
      p.split_keys = ((p.max_keys + splits - 1) / splits + kSplitGranule - 1) / kSplitGranule *
                     kSplitGranule;
      p.splits = (p.max_keys + p.split_keys - 1) / p.split_keys;
    }
    if (p.splits > 1) {
      p.record = record_floats(p.dim_v);
      const Tensor& scratch = call.keep(call.empty({rows * p.splits * p.record}, DType::f32));
      p.partials = static_cast<float*>(scratch.data());
    } else {
      p.splits = 1;
    }
#endif
  }
  if (!call.device.is_cpu()) {
    // One block per (item, KV head, row tile, split): the grid's x dimension bounds it.
    const int64_t group = p.heads_q / p.heads_kv;
    const int64_t tiles = (group * p.sched.max_item_queries + rows_per_block(p.dim_v) - 1) /
                          rows_per_block(p.dim_v);
    const double blocks = static_cast<double>(p.sched.items) * static_cast<double>(p.heads_kv) *
                          static_cast<double>(tiles) * static_cast<double>(p.splits);
    if (blocks > static_cast<double>(kInt32Max)) {
      fail(ErrorCode::Unsupported,
           cat(call.op, ": the schedule needs ", blocks, " blocks (work items x KV heads x row ",
               "tiles x splits); the CUDA kernels launch at most 2^31 - 1"));
    }
  }
  common::run_backend(call, p, RUDNN_BACKENDS(paged, forward));
}

void require_workspace(const OpCall& call, const SplitWorkspace& ws, const Stream& stream,
                       int64_t queries, int64_t heads, int64_t value_dim) {
  if (ws.storage().device() != call.device) {
    fail(ErrorCode::DeviceMismatch, cat(call.op, ": workspace is on ", ws.storage().device().str(),
                                        ", the plan on ", call.device.str()));
  }
  if (!(ws.stream() == stream)) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": workspace was made for another stream than the plan's; a workspace is ",
             "reused only on the same ordered stream"));
  }
  if (ws.queries() != queries || ws.heads() != heads || ws.value_dim() != value_dim) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": workspace was made for (queries, heads, value_dim) = (", ws.queries(), ", ",
             ws.heads(), ", ", ws.value_dim(), "); this call needs (", queries, ", ", heads, ", ",
             value_dim, ")"));
  }
}

int page_shift(int64_t page_size) {
  for (int shift = 0; shift < 31; ++shift)
    if ((int64_t{1} << shift) == page_size) return shift;
  return -1;
}

Schedule plan_schedule(const DevicePlan::State& st) {
  Schedule s;
  const HostPlan& h = st.host;
  s.page_size = h.page_size();
  s.page_shift = page_shift(h.page_size());
  s.pages = h.pages();
  s.items = h.items();
  s.max_item_queries = static_cast<int>(h.max_item_queries());
  const int32_t* base = st.meta.data_as<int32_t>();
  s.seq_ids = base + st.layout.seq_ids();
  s.positions = base + st.layout.positions();
  s.lengths = base + st.layout.lengths();
  s.table_offsets = base + st.layout.table_offsets();
  s.tables = base + st.layout.tables();
  s.item_table = base + st.layout.item_table();
  return s;
}

// The call of a DevicePlan op on q: the plan's stream, q's device (which must be the plan's).
OpCall plan_call(const DevicePlan::State& st, const char* op, const Tensor& q) {
  OpCall call(op, "q", q, st.stream);
  if (call.device != st.device) {
    fail(ErrorCode::DeviceMismatch,
         cat(op, ": q is on ", call.device.str(), ", the plan on ", st.device.str()));
  }
  return call;
}

// The checks of attention(q, k_cache, v_cache, scale, causal) and its problem (all but the
// output), shared by the forward and the backward.
PagedForward attention_problem(const DevicePlan::State& st, const OpCall& call, const Tensor& q,
                               const Tensor& k, const Tensor& v, float scale, bool causal) {
  const char* op = call.op;
  common::require_float(call, "q", q);
  require_same_dtype(call, "k_cache", k, q);
  require_same_dtype(call, "v_cache", v, q);
  require_rank(call, "q", q, 3, "[queries, Hq, D]");
  require_rank(call, "k_cache", k, 4, "[pages, page_size, Hkv, D]");
  require_rank(call, "v_cache", v, 4, "[pages, page_size, Hkv, Dv]");
  const HostPlan& h = st.host;
  const int64_t queries = q.size(0), heads_q = q.size(1), dim = q.size(2);
  const int64_t heads_kv = k.size(2), dim_v = v.size(3);
  if (queries != h.queries()) {
    fail(ErrorCode::ShapeMismatch, cat(op, ": q has ", queries, " queries (shape ",
                                       shape_str(q.shape()), "); the plan has ", h.queries()));
  }
  const Shape k_want{h.pages(), h.page_size(), heads_kv, dim};
  common::require_shape(call, "k_cache", k, k_want, "[pages, page_size, Hkv, D]");
  common::require_shape(call, "v_cache", v, {h.pages(), h.page_size(), heads_kv, dim_v},
                        "[pages, page_size, Hkv, Dv]");
  if (heads_kv < 1 || heads_q % heads_kv != 0) {
    fail(ErrorCode::ShapeMismatch, cat(op, ": Hq = ", heads_q, " is not a multiple of Hkv = ",
                                       heads_kv, "; expected Hq = group * Hkv"));
  }
  require_dim(call, "D", dim, kMaxHeadDim);
  require_dim(call, "Dv", dim_v, kMaxHeadDim);
  common::require_finite_positive(call, "scale", scale);
  require_contiguous(call, "q", q);
  require_contiguous(call, "k_cache", k);
  require_contiguous(call, "v_cache", v);
  PagedForward p;
  p.dtype = q.dtype();
  p.sched = plan_schedule(st);
  p.queries = queries;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.dim_qk = dim;
  p.dim_v = dim_v;
  p.q = rows3_in(q);
  p.k = plan_cache(k);
  p.v = plan_cache(v);
  p.scale = scale;
  p.causal = causal;
  p.max_keys = h.max_keys(causal);
  return p;
}

void attention_impl(const DevicePlan::State& st, const char* op, const Tensor* out_given,
                    Tensor* out_made, const Tensor& q, const Tensor& k, const Tensor& v,
                    float scale, bool causal, SplitWorkspace* ws) {
  OpCall call = plan_call(st, op, q);
  PagedForward p = attention_problem(st, call, q, k, v, scale, causal);
  if (ws) require_workspace(call, *ws, st.stream, p.queries, p.heads_q, p.dim_v);
  const Shape out_shape{p.queries, p.heads_q, p.dim_v};
  Tensor out;
  if (out_given) {
    require_out_contiguous(call, *out_given, out_shape, q.dtype(),
                           {{"q", &q}, {"k_cache", &k}, {"v_cache", &v}});
    out = *out_given;
  } else {
    out = call.empty(out_shape, q.dtype());
  }
  p.out = rows3_out(out);
  run_forward(call, p, ws);
  if (out_made) *out_made = out;
}

// The checks of mla(q, qp, latent, kp, scale, causal) and its problem (all but the output),
// shared by the forward and the backward.
PagedForward mla_problem(const DevicePlan::State& st, const OpCall& call, const Tensor& q,
                         const Tensor& qp, const Tensor& latent, const Tensor& kp, float scale,
                         bool causal) {
  const char* op = call.op;
  common::require_float(call, "q", q);
  require_same_dtype(call, "qp", qp, q);
  require_same_dtype(call, "latent", latent, q);
  require_same_dtype(call, "kp", kp, q);
  require_rank(call, "q", q, 3, "[queries, H, R]");
  require_rank(call, "qp", qp, 3, "[queries, H, P]");
  require_rank(call, "latent", latent, 4, "[pages, page_size, 1, R]");
  require_rank(call, "kp", kp, 4, "[pages, page_size, 1, P]");
  const HostPlan& h = st.host;
  const int64_t queries = q.size(0), heads = q.size(1), rank = q.size(2), pos_dim = qp.size(2);
  if (queries != h.queries()) {
    fail(ErrorCode::ShapeMismatch, cat(op, ": q has ", queries, " queries (shape ",
                                       shape_str(q.shape()), "); the plan has ", h.queries()));
  }
  common::require_shape(call, "qp", qp, {queries, heads, pos_dim}, "[queries, H, P]");
  common::require_shape(call, "latent", latent, {h.pages(), h.page_size(), 1, rank},
                        "[pages, page_size, 1, R]");
  common::require_shape(call, "kp", kp, {h.pages(), h.page_size(), 1, pos_dim},
                        "[pages, page_size, 1, P]");
  require_dim(call, "R", rank, kMaxHeadDim);
  require_dim(call, "P", pos_dim, kMaxPositionalDim);
  if (heads < 1) {
    fail(ErrorCode::ShapeMismatch, cat(op, ": q has shape ", shape_str(q.shape()),
                                       "; expected at least one head"));
  }
  common::require_finite_positive(call, "scale", scale);
  require_contiguous(call, "q", q);
  require_contiguous(call, "qp", qp);
  require_contiguous(call, "latent", latent);
  require_contiguous(call, "kp", kp);
  PagedForward p;
  p.dtype = q.dtype();
  p.sched = plan_schedule(st);
  p.queries = queries;
  p.heads_q = heads;
  p.heads_kv = 1;
  p.dim_qk = rank;
  p.dim_pos = pos_dim;
  p.dim_v = rank;
  p.q = rows3_in(q);
  p.qp = rows3_in(qp);
  p.k = plan_cache(latent);
  p.kp = plan_cache(kp);
  p.v = p.k;
  p.scale = scale;
  p.causal = causal;
  p.max_keys = h.max_keys(causal);
  return p;
}

void mla_impl(const DevicePlan::State& st, const char* op, const Tensor* out_given,
              Tensor* out_made, const Tensor& q, const Tensor& qp, const Tensor& latent,
              const Tensor& kp, float scale, bool causal, SplitWorkspace* ws) {
  OpCall call = plan_call(st, op, q);
  PagedForward p = mla_problem(st, call, q, qp, latent, kp, scale, causal);
  if (ws) require_workspace(call, *ws, st.stream, p.queries, p.heads_q, p.dim_v);
  const Shape out_shape{p.queries, p.heads_q, p.dim_v};
  Tensor out;
  if (out_given) {
    require_out_contiguous(call, *out_given, out_shape, q.dtype(),
                           {{"q", &q}, {"qp", &qp}, {"latent", &latent}, {"kp", &kp}});
    out = *out_given;
  } else {
    out = call.empty(out_shape, q.dtype());
  }
  p.out = rows3_out(out);
  run_forward(call, p, ws);
  if (out_made) *out_made = out;
}

}  // namespace

Tensor DevicePlan::attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                             float scale, bool causal) const {
  const char* op = "paged_attention::DevicePlan::attention";
  Tensor out;
  attention_impl(require_plan(state_, op), op, nullptr, &out, q, k_cache, v_cache, scale, causal,
                 nullptr);
  return out;
}

void DevicePlan::attention_into(const Tensor& out, const Tensor& q, const Tensor& k_cache,
                                const Tensor& v_cache, float scale, bool causal) const {
  const char* op = "paged_attention::DevicePlan::attention_into";
  attention_impl(require_plan(state_, op), op, &out, nullptr, q, k_cache, v_cache, scale, causal,
                 nullptr);
}

Tensor DevicePlan::attention_with_workspace(SplitWorkspace& workspace, const Tensor& q,
                                            const Tensor& k_cache, const Tensor& v_cache,
                                            float scale, bool causal) const {
  const char* op = "paged_attention::DevicePlan::attention_with_workspace";
  Tensor out;
  attention_impl(require_plan(state_, op), op, nullptr, &out, q, k_cache, v_cache, scale, causal,
                 &workspace);
  return out;
}

Tensor DevicePlan::mla(const Tensor& q, const Tensor& qp, const Tensor& latent, const Tensor& kp,
                       float scale, bool causal) const {
  const char* op = "paged_attention::DevicePlan::mla";
  Tensor out;
  mla_impl(require_plan(state_, op), op, nullptr, &out, q, qp, latent, kp, scale, causal, nullptr);
  return out;
}

void DevicePlan::mla_into(const Tensor& out, const Tensor& q, const Tensor& qp,
                          const Tensor& latent, const Tensor& kp, float scale, bool causal) const {
  const char* op = "paged_attention::DevicePlan::mla_into";
  mla_impl(require_plan(state_, op), op, &out, nullptr, q, qp, latent, kp, scale, causal, nullptr);
}

Tensor DevicePlan::mla_with_workspace(SplitWorkspace& workspace, const Tensor& q, const Tensor& qp,
                                      const Tensor& latent, const Tensor& kp, float scale,
                                      bool causal) const {
  const char* op = "paged_attention::DevicePlan::mla_with_workspace";
  Tensor out;
  mla_impl(require_plan(state_, op), op, nullptr, &out, q, qp, latent, kp, scale, causal,
           &workspace);
  return out;
}

// ---- Backward -------------------------------------------------------------------------------

namespace {

struct GradSpec {
  const char* name;
  const Tensor* t;
  Shape shape;
};

// Given outputs: each defined one of its shape and dtype, contiguous, on the call's device,
// overlapping no input and no other output; all checked before anything is written.
void require_grads(const OpCall& call, DType dtype, std::initializer_list<GradSpec> grads,
                   std::initializer_list<std::pair<const char*, const Tensor*>> inputs) {
  for (const GradSpec& g : grads) {
    if (!g.t->defined()) continue;
    common::require_out(call, g.name, *g.t, g.shape, dtype);
    require_contiguous(call, g.name, *g.t);
    common::require_no_overlap(call, g.name, *g.t, inputs);
  }
  for (auto a = grads.begin(); a != grads.end(); ++a) {
    if (!a->t->defined()) continue;
    for (auto b = a + 1; b != grads.end(); ++b) {
      if (b->t->defined()) common::require_no_overlap(call, a->name, *a->t, {{b->name, b->t}});
    }
  }
}

// The backward has no CUDA kernel yet: refused once the arguments are known to be valid,
// before any output is allocated or written.
void require_cpu_backward(const OpCall& call) {
  if (!call.device.is_cpu()) {
    fail(ErrorCode::Unsupported,
         cat(call.op, ": paged attention backward has no CUDA kernel yet (the float64 CPU ",
             "reference only); move the tensors to the CPU"));
  }
}

BshdOut rows3_out_opt(const Tensor& t) { return t.defined() ? rows3_out(t) : BshdOut{}; }
CacheOut cache_out_opt(const Tensor& t) {
  if (!t.defined()) return {};
  return {t.data(), t.size(1) * t.size(2) * t.size(3), t.size(2) * t.size(3), t.size(3)};
}

// An ordered workspace's rules: made for this plan's schedule, q's counts, device and stream.
void require_ordered_workspace(const OpCall& call, const DevicePlan::State& st,
                               const OrderedBackwardWorkspace& ws, const Tensor& q) {
  const auto refuse = [&](const std::string& what) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": workspace ", what, "; an OrderedBackwardWorkspace is reused only with ",
             "the plan, query and head counts, device and stream it was made for"));
  };
  if (ws.device() != call.device)
    refuse(cat("was made on ", ws.device().str(), ", the plan is on ", call.device.str()));
  if (!(ws.stream() == st.stream)) refuse("was made for another stream than the plan's");
  if (ws.queries() != q.size(0) || ws.heads() != q.size(1)) {
    refuse(cat("was made for (queries, heads) = (", ws.queries(), ", ", ws.heads(), "); q has (",
               q.size(0), ", ", q.size(1), ")"));
  }
  if (ws.page_size() != st.host.page_size() || ws.pages() != st.host.pages() ||
      ws.schedule() != st.host.packed()) {
    refuse(
        "was made for another plan's scheduling metadata (page size, pages or tables, "
        "lengths, query sequences and positions differ)");
  }
}

// No given output may overlap the workspace's storage.
void require_clear_of_workspace(const OpCall& call, const OrderedBackwardWorkspace* ws,
                                std::initializer_list<std::pair<const char*, const Tensor*>> outs) {
  if (!ws || !ws->storage().defined()) return;
  for (const auto& [name, t] : outs) {
    if (t->defined()) common::require_no_overlap(call, name, *t, {{"workspace", &ws->storage()}});
  }
}

// grad_out's rules: the forward output's shape (`what` names its axes), q's dtype, contiguous.
void require_grad_out(const OpCall& call, const Tensor& go, const Tensor& q,
                      const PagedForward& p, const char* what) {
  require_same_dtype(call, "grad_out", go, q);
  common::require_shape(call, "grad_out", go, {p.queries, p.heads_q, p.dim_v}, what);
  require_contiguous(call, "grad_out", go);
}

void attention_backward_impl(const DevicePlan::State& st, const char* op,
                             const AttentionBackward* given, AttentionBackward* made,
                             const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& go,
                             float scale, bool causal,
                             const OrderedBackwardWorkspace* ws = nullptr) {
  OpCall call = plan_call(st, op, q);
  PagedBackward b;
  b.fwd = attention_problem(st, call, q, k, v, scale, causal);
  require_grad_out(call, go, q, b.fwd, "[queries, Hq, Dv]");
  if (ws) require_ordered_workspace(call, st, *ws, q);
  const Shape q_shape = q.shape(), k_shape = k.shape(), v_shape = v.shape();
  AttentionBackward grads;
  if (given) {
    require_grads(
        call, q.dtype(),
        {{"dq", &given->dq, q_shape}, {"dk", &given->dk, k_shape}, {"dv", &given->dv, v_shape}},
        {{"q", &q}, {"k_cache", &k}, {"v_cache", &v}, {"grad_out", &go}});
    require_clear_of_workspace(call, ws,
                               {{"dq", &given->dq}, {"dk", &given->dk}, {"dv", &given->dv}});
    require_cpu_backward(call);
    grads = *given;
  } else {
    require_cpu_backward(call);
    grads = {call.empty(q_shape, q.dtype()), call.empty(k_shape, q.dtype()),
             call.empty(v_shape, q.dtype())};
  }
  b.dout = rows3_in(go);
  b.dq = rows3_out_opt(grads.dq);
  b.dk = cache_out_opt(grads.dk);
  b.dv = cache_out_opt(grads.dv);
  if (b.dq.data || b.dk.data || b.dv.data) reference::backward(b);
  if (made) *made = std::move(grads);
}

void mla_backward_impl(const DevicePlan::State& st, const char* op, const MlaBackward* given,
                       MlaBackward* made, const Tensor& q, const Tensor& qp, const Tensor& latent,
                       const Tensor& kp, const Tensor& go, float scale, bool causal,
                       const OrderedBackwardWorkspace* ws = nullptr) {
  OpCall call = plan_call(st, op, q);
  PagedBackward b;
  b.fwd = mla_problem(st, call, q, qp, latent, kp, scale, causal);
  require_grad_out(call, go, q, b.fwd, "[queries, H, R]");
  if (ws) require_ordered_workspace(call, st, *ws, q);
  const Shape q_shape = q.shape(), qp_shape = qp.shape();
  const Shape latent_shape = latent.shape(), kp_shape = kp.shape();
  MlaBackward grads;
  if (given) {
    require_grads(call, q.dtype(),
                  {{"dq", &given->dq, q_shape},
                   {"dqp", &given->dqp, qp_shape},
                   {"dlatent", &given->dlatent, latent_shape},
                   {"dkp", &given->dkp, kp_shape}},
                  {{"q", &q}, {"qp", &qp}, {"latent", &latent}, {"kp", &kp}, {"grad_out", &go}});
    require_clear_of_workspace(call, ws,
                               {{"dq", &given->dq},
                                {"dqp", &given->dqp},
                                {"dlatent", &given->dlatent},
                                {"dkp", &given->dkp}});
    require_cpu_backward(call);
    grads = *given;
  } else {
    require_cpu_backward(call);
    grads = {call.empty(q_shape, q.dtype()), call.empty(qp_shape, q.dtype()),
             call.empty(latent_shape, q.dtype()), call.empty(kp_shape, q.dtype())};
  }
  b.dout = rows3_in(go);
  b.dq = rows3_out_opt(grads.dq);
  b.dqp = rows3_out_opt(grads.dqp);
  b.dk = cache_out_opt(grads.dlatent);
  b.dkp = cache_out_opt(grads.dkp);
  if (b.dq.data || b.dqp.data || b.dk.data || b.dkp.data) reference::backward(b);
  if (made) *made = std::move(grads);
}

}  // namespace

AttentionBackward DevicePlan::attention_backward(const Tensor& q, const Tensor& k_cache,
                                                 const Tensor& v_cache, const Tensor& grad_out,
                                                 float scale, bool causal) const {
  const char* op = "paged_attention::DevicePlan::attention_backward";
  AttentionBackward grads;
  attention_backward_impl(require_plan(state_, op), op, nullptr, &grads, q, k_cache, v_cache,
                          grad_out, scale, causal);
  return grads;
}

void DevicePlan::attention_backward_selected_into(const AttentionBackward& grads, const Tensor& q,
                                                  const Tensor& k_cache, const Tensor& v_cache,
                                                  const Tensor& grad_out, float scale,
                                                  bool causal) const {
  const char* op = "paged_attention::DevicePlan::attention_backward_selected_into";
  attention_backward_impl(require_plan(state_, op), op, &grads, nullptr, q, k_cache, v_cache,
                          grad_out, scale, causal);
}

MlaBackward DevicePlan::mla_backward(const Tensor& q, const Tensor& qp, const Tensor& latent,
                                     const Tensor& kp, const Tensor& grad_out, float scale,
                                     bool causal) const {
  const char* op = "paged_attention::DevicePlan::mla_backward";
  MlaBackward grads;
  mla_backward_impl(require_plan(state_, op), op, nullptr, &grads, q, qp, latent, kp, grad_out,
                    scale, causal);
  return grads;
}

void DevicePlan::mla_backward_selected_into(const MlaBackward& grads, const Tensor& q,
                                            const Tensor& qp, const Tensor& latent,
                                            const Tensor& kp, const Tensor& grad_out, float scale,
                                            bool causal) const {
  const char* op = "paged_attention::DevicePlan::mla_backward_selected_into";
  mla_backward_impl(require_plan(state_, op), op, &grads, nullptr, q, qp, latent, kp, grad_out,
                    scale, causal);
}

// The CPU reference is the ordered backward already (fixed order, no atomics): the workspace
// is checked and its options recorded for the kernels, and the reference runs.
void DevicePlan::attention_backward_ordered_into(OrderedBackwardWorkspace& workspace,
                                                 const AttentionBackward& grads, const Tensor& q,
                                                 const Tensor& k_cache, const Tensor& v_cache,
                                                 const Tensor& grad_out, float scale,
                                                 bool causal) const {
  const char* op = "paged_attention::DevicePlan::attention_backward_ordered_into";
  attention_backward_impl(require_plan(state_, op), op, &grads, nullptr, q, k_cache, v_cache,
                          grad_out, scale, causal, &workspace);
}

void DevicePlan::mla_backward_ordered_into(OrderedBackwardWorkspace& workspace,
                                           const MlaBackward& grads, const Tensor& q,
                                           const Tensor& qp, const Tensor& latent, const Tensor& kp,
                                           const Tensor& grad_out, float scale, bool causal) const {
  const char* op = "paged_attention::DevicePlan::mla_backward_ordered_into";
  mla_backward_impl(require_plan(state_, op), op, &grads, nullptr, q, qp, latent, kp, grad_out,
                    scale, causal, &workspace);
}

// ---- Cache writes ---------------------------------------------------------------------------

AppendResult DevicePlan::append(const Tensor& k, const Tensor& v, const Tensor& key_cache,
                                const Tensor& value_cache) const {
  const char* op = "paged_attention::DevicePlan::append";
  const State& st = require_plan(state_, op);
  OpCall call(op, "k", k, st.stream);
  if (call.device != st.device) {
    fail(ErrorCode::DeviceMismatch,
         cat(op, ": k is on ", call.device.str(), ", the plan on ", st.device.str()));
  }
  const HostPlan& h = st.host;
  if (h.duplicate_slots()) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": two queries of the plan write the same physical slot (shared pages); ",
             "duplicate physical writes are rejected: copy the shared page first"));
  }
  common::require_float(call, "k", k);
  require_same_dtype(call, "v", v, k);
  require_same_dtype(call, "key_cache", key_cache, k);
  require_same_dtype(call, "value_cache", value_cache, k);
  require_rank(call, "k", k, 3, "[queries, Hkv, D]");
  require_rank(call, "v", v, 3, "[queries, Hkv, Dv]");
  require_rank(call, "key_cache", key_cache, 4, "[pages, page_size, Hkv, D]");
  require_rank(call, "value_cache", value_cache, 4, "[pages, page_size, Hkv, Dv]");
  const int64_t heads = k.size(1), dim = k.size(2), dim_v = v.size(2);
  common::require_shape(call, "k", k, {h.queries(), heads, dim}, "[queries, Hkv, D]");
  common::require_shape(call, "v", v, {h.queries(), heads, dim_v}, "[queries, Hkv, Dv]");
  common::require_shape(call, "key_cache", key_cache, {h.pages(), h.page_size(), heads, dim},
                        "[pages, page_size, Hkv, D]");
  common::require_shape(call, "value_cache", value_cache,
                        {h.pages(), h.page_size(), heads, dim_v}, "[pages, page_size, Hkv, Dv]");
  require_contiguous(call, "key_cache", key_cache);
  require_contiguous(call, "value_cache", value_cache);
  common::require_no_overlap(call, "key_cache", key_cache,
                             {{"k", &k}, {"v", &v}, {"value_cache", &value_cache}});
  common::require_no_overlap(call, "value_cache", value_cache, {{"k", &k}, {"v", &v}});
  const void* k_rows = common::dense_in(call, k);
  const void* v_rows = common::dense_in(call, v);
  // A cache whose storage another handle also reaches (a view, a second handle) is copied on
  // the plan's stream before the write, so that handle keeps the old contents; a cache the
  // caller holds alone is written in place. Counted before `kept` adds handles of its own.
  auto writable = [&](const Tensor& cache) {
    return cache.storage_handles() > 1 ? cache.to(cache.device(), st.stream) : cache;
  };
  Tensor key_out = writable(key_cache);
  Tensor value_out = writable(value_cache);
  const AppendResult kept{std::move(key_out), std::move(value_out)};
  const int32_t* slots = st.meta.data_as<int32_t>() + st.layout.slots();
  for (int which = 0; which < 2; ++which) {
    const Tensor& cache = which == 0 ? kept.key_cache : kept.value_cache;
    PagedWrite w;
    w.dtype = k.dtype();
    w.tokens = h.queries();
    w.heads = heads;
    w.dim = which == 0 ? dim : dim_v;
    w.page_size = h.page_size();
    w.pages = h.pages();
    w.src = which == 0 ? k_rows : v_rows;
    w.slots = slots;
    w.slots_dtype = DType::i32;
    w.cache = cache.data();
    const CacheView view = plan_cache(cache);
    w.page_stride = view.page_stride;
    w.row_stride = view.row_stride;
    w.head_stride = view.head_stride;
    if (w.tokens > 0 && w.heads > 0 && w.dim > 0)
      common::run_backend(call, w, RUDNN_BACKENDS(paged, write));
  }
  return kept;
}

// ---- Block-table form -----------------------------------------------------------------------

namespace {

// paged_attention and paged_attention_into: validates, then writes *out_given (checked here)
// or a new result into *out_made.
void block_table_attention(const char* op, const Tensor* out_given, Tensor* out_made,
                           const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                           const Tensor& block_tables, const Tensor& lengths, float scale,
                           const Stream& stream) {
  OpCall call(op, "q", q, stream);
  common::require_float(call, "q", q);
  require_same_dtype(call, "k_cache", k_cache, q);
  require_same_dtype(call, "v_cache", v_cache, q);
  common::require_dtype(call, "block_tables", block_tables, {DType::i32, DType::i64});
  common::require_dtype(call, "lengths", lengths, {DType::i32, DType::i64});
  require_rank(call, "q", q, 4, "[B, Hq, L, D]");
  require_rank(call, "k_cache", k_cache, 4, "[blocks, Hkv, block_size, D]");
  require_rank(call, "v_cache", v_cache, 4, "[blocks, Hkv, block_size, Dv]");
  require_rank(call, "block_tables", block_tables, 2, "[B, max_blocks]");
  const int64_t batch = q.size(0), heads_q = q.size(1), len_q = q.size(2), dim = q.size(3);
  const int64_t blocks = k_cache.size(0), heads_kv = k_cache.size(1), block_size = k_cache.size(2);
  const int64_t dim_v = v_cache.size(3), max_blocks = block_tables.size(1);
  common::require_shape(call, "k_cache", k_cache, {blocks, heads_kv, block_size, dim},
                        "[blocks, Hkv, block_size, D]");
  common::require_shape(call, "v_cache", v_cache, {blocks, heads_kv, block_size, dim_v},
                        "[blocks, Hkv, block_size, Dv]");
  common::require_shape(call, "block_tables", block_tables, {batch, max_blocks}, "[B, max_blocks]");
  common::require_shape(call, "lengths", lengths, {batch}, "[B]");
  if (heads_kv < 1 || heads_q % heads_kv != 0) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": Hq = ", heads_q, " is not a multiple of Hkv = ",
                                       heads_kv, "; expected Hq = group * Hkv"));
  }
  require_dim(call, "D", dim, kMaxHeadDim);
  require_dim(call, "Dv", dim_v, kMaxHeadDim);
  require_dim(call, "block_size", block_size, kMaxPageSize);
  common::require_finite_positive(call, "scale", scale);
  if (blocks < 1 && batch * len_q * heads_q > 0) {
    fail(ErrorCode::ShapeMismatch,
         cat(call.op, ": k_cache has no blocks; expected at least one (block ids are clamped ",
             "into 0 .. blocks - 1)"));
  }
  require_contiguous(call, "k_cache", k_cache);
  require_contiguous(call, "v_cache", v_cache);
  if (max_blocks > kInt32Max / block_size) {
    fail(ErrorCode::Unsupported,
         cat(call.op, ": block_tables holds ", max_blocks, " blocks of ", block_size,
             " keys per sequence; the kernels index keys below 2^31"));
  }
  const BshdIn qv = common::bshd_in(call, "q", q, common::Axes4::bhsd);
  const Shape out_shape{batch, heads_q, len_q, dim_v};
  Tensor out;
  if (out_given != nullptr) {
    common::require_out(call, "out", *out_given, out_shape, q.dtype());
    require_contiguous(call, "out", *out_given);
    common::require_no_overlap(call, "out", *out_given,
                               {{"q", &q}, {"k_cache", &k_cache}, {"v_cache", &v_cache},
                                {"block_tables", &block_tables}, {"lengths", &lengths}});
    out = *out_given;
  } else {
    out = call.empty(out_shape, q.dtype());
  }
  PagedForward p;
  p.dtype = q.dtype();
  Schedule& s = p.sched;
  s.block_form = true;
  s.page_size = block_size;
  s.page_shift = page_shift(block_size);
  s.pages = blocks;
  s.batch = batch;
  s.len_q = len_q;
  s.max_blocks = max_blocks;
  s.max_item_queries = static_cast<int>(std::min(len_q, kItemQueries));
  s.items = len_q > 0 ? batch * ((len_q + kItemQueries - 1) / kItemQueries) : 0;
  s.block_tables = common::dense_in(call, block_tables);
  s.tables_i64 = block_tables.dtype() == DType::i64;
  s.block_lengths = common::dense_in(call, lengths);
  s.lengths_i64 = lengths.dtype() == DType::i64;
  p.queries = batch * len_q;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.dim_qk = dim;
  p.dim_v = dim_v;
  p.q = qv;
  p.k = block_cache(k_cache);
  p.v = block_cache(v_cache);
  p.out.data = out.data();
  p.out.batch_stride = heads_q * len_q * dim_v;
  p.out.seq_stride = dim_v;
  p.out.head_stride = len_q * dim_v;
  p.scale = scale;
  p.causal = true;
  p.max_keys = max_blocks * block_size;
  run_forward(call, p, nullptr);
  if (out_made != nullptr) *out_made = out;
}

}  // namespace

Tensor paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const Tensor& block_tables, const Tensor& lengths, float scale,
                       const Stream& stream) {
  Tensor out;
  block_table_attention("paged_attention", nullptr, &out, q, k_cache, v_cache, block_tables,
                        lengths, scale, stream);
  return out;
}

void paged_attention_into(const Tensor& out, const Tensor& q, const Tensor& k_cache,
                          const Tensor& v_cache, const Tensor& block_tables,
                          const Tensor& lengths, float scale, const Stream& stream) {
  block_table_attention("paged_attention", &out, nullptr, q, k_cache, v_cache,
                        block_tables, lengths, scale, stream);
}

namespace {

// Validates a paged_write and fills its problem, all but the target cache.
PagedWrite validate_write(OpCall& call, const Tensor& cache, const Tensor& new_values,
                          const Tensor& slots) {
  common::require_float(call, "cache", cache);
  require_same_dtype(call, "new", new_values, cache);
  common::require_dtype(call, "slots", slots, {DType::i32, DType::i64});
  require_rank(call, "cache", cache, 4, "[blocks, Hkv, block_size, D]");
  require_rank(call, "new", new_values, 3, "[T, Hkv, D]");
  require_rank(call, "slots", slots, 1, "[T]");
  const int64_t tokens = new_values.size(0), heads = cache.size(1), dim = cache.size(3);
  common::require_shape(call, "new", new_values, {tokens, heads, dim}, "[T, Hkv, D]");
  common::require_shape(call, "slots", slots, {tokens}, "[T]");
  require_dim(call, "block_size", cache.size(2), kMaxPageSize);
  if (tokens > kInt32Max) {
    fail(ErrorCode::Unsupported, cat(call.op, ": new has ", tokens, " rows; at most 2^31 - 1 ",
                                     "(one block each)"));
  }
  PagedWrite w;
  w.dtype = cache.dtype();
  w.tokens = tokens;
  w.heads = heads;
  w.dim = dim;
  w.page_size = cache.size(2);
  w.pages = cache.size(0);
  w.src = common::dense_in(call, new_values);
  w.slots = common::dense_in(call, slots);
  w.slots_dtype = slots.dtype();
  if (call.device.is_cpu()) {
    // Duplicates can be read here; on the GPU reading them back would synchronise.
    std::vector<int64_t> seen;
    const int64_t capacity = w.pages * w.page_size;
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t slot = load_index(w.slots, w.slots_dtype == DType::i64, t);
      if (slot >= 0 && slot < capacity) seen.push_back(slot);
    }
    std::sort(seen.begin(), seen.end());
    const auto dup = std::adjacent_find(seen.begin(), seen.end());
    if (dup != seen.end()) {
      fail(ErrorCode::InvalidArgument,
           cat(call.op, ": slots holds ", *dup, " twice; expected distinct slots"));
    }
  }
  return w;
}

void run_write(const OpCall& call, PagedWrite w, const Tensor& target) {
  w.cache = target.data();
  const CacheView view = block_cache(target);
  w.page_stride = view.page_stride;
  w.row_stride = view.row_stride;
  w.head_stride = view.head_stride;
  if (w.tokens > 0 && w.heads > 0 && w.dim > 0 && w.pages > 0)
    common::run_backend(call, w, RUDNN_BACKENDS(paged, write));
}

}  // namespace

Tensor paged_write(const Tensor& cache, const Tensor& new_values, const Tensor& slots,
                   const Stream& stream) {
  OpCall call("paged_write", "cache", cache, stream);
  const PagedWrite w = validate_write(call, cache, new_values, slots);
  Tensor out = call.empty(cache.shape(), cache.dtype());
  out.copy_from(cache, call.stream);
  run_write(call, w, out);
  return out;
}

void paged_write_(const Tensor& cache, const Tensor& new_values, const Tensor& slots,
                  const Stream& stream) {
  OpCall call("paged_write_", "cache", cache, stream);
  const PagedWrite w = validate_write(call, cache, new_values, slots);
  require_contiguous(call, "cache", cache);
  common::require_no_overlap(call, "cache", cache, {{"new", &new_values}, {"slots", &slots}});
  run_write(call, w, cache);
}

}  // namespace rudnn::paged
