// The paged attention family's rows of the op contract (tests/support/op_contract.h): spec
// 003's block-table paged_attention (both forms) and paged_write_ (in place). The rows are
// sequences (paged_attention: q [B, 4, 2, D], block_tables [B, 3], lengths [B]) or written
// tokens (paged_write_: new [T, 2, D], slots [T]); the caches [blocks, 2, 4, D] are not
// row-shaped. D = min(cols, 64). The DevicePlan calls take a plan made on the host, outside
// this row model; their contract is tested in test_errors.cpp and test_gpu.cpp. No row takes
// the > 2^31 check: the caches, not the rows, are what grows, and the kernels' 64-bit cache
// addressing is tested in test_gpu.cpp.
#include <algorithm>
#include <vector>

#include "rudnn/paged_attention.h"
#include "support/op_contract.h"

namespace rudnn::test {
namespace {

using contract::Args;
using contract::Operand;
using contract::OpRow;

constexpr int64_t kHq = 4, kHkv = 2, kL = 2, kBlockSize = 4, kMaxBlocks = 3;
constexpr float kScale = 0.125f;

int64_t head_dim(int64_t cols) { return std::clamp<int64_t>(cols, 1, 64); }

// Block tables and lengths are integers: a float dtype is refused.
Operand index_operand(const char* name) { return {name, DType::f32}; }

std::vector<OpRow> make_rows() {
  std::vector<OpRow> rows;
  rows.push_back({
      .name = "paged_attention",
      .inputs = {{"q"}, {"k_cache"}, {"v_cache"}, index_operand("block_tables"),
                 index_operand("lengths")},
      .outputs = {{"out"}},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const int64_t d = head_dim(cols), blocks = 2 * r + 1;
            // Sequence b has kL .. kMaxBlocks * kBlockSize keys in distinct random blocks.
            const Tensor tables =
                random_integers(rng, {r, kMaxBlocks}, DType::i32, 0, blocks - 1);
            const Tensor lengths =
                random_integers(rng, {r}, DType::i64, kL, kMaxBlocks * kBlockSize);
            const Tensor q = random_tensor(rng, {r, kHq, kL, d}, dt);
            return Args{{q, random_tensor(rng, {blocks, kHkv, kBlockSize, d}, dt),
                         random_tensor(rng, {blocks, kHkv, kBlockSize, d}, dt), tables, lengths},
                        {Tensor::empty(q.shape(), dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            return std::vector<Tensor>{
                paged::paged_attention(i[0], i[1], i[2], i[3], i[4], kScale, s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            paged::paged_attention_into(a.outputs[0], i[0], i[1], i[2], i[3], i[4], kScale, s);
          },
      .takes_big = false,
      .not_capturable_because =
          "long histories split through a stream-ordered FP32 scratch (paged_attention.h, "
          "\"Internal split\")",
  });
  // In place (the cache), the _into form only, as the contract takes in-place ops: token t
  // goes to slot 3 t + 1 of a cache of at least 3 T + 2 slots (distinct, some left untouched).
  rows.push_back({
      .name = "paged_write_",
      .inputs = {{"new"}, index_operand("slots")},
      .outputs = {{"cache"}},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const int64_t d = head_dim(cols);
            // No rows, no cache: the contract takes a non-row output of zero rows as a sum.
            const int64_t blocks = r == 0 ? 0 : (3 * r + 2 + kBlockSize - 1) / kBlockSize;
            std::vector<int64_t> slots;
            for (int64_t t = 0; t < r; ++t) slots.push_back(3 * t + 1);
            return Args{{random_tensor(rng, {r, kHkv, d}, dt), Tensor::from_host(slots, {r})},
                        {random_tensor(rng, {blocks, kHkv, kBlockSize, d}, dt)}};
          },
      .into = [](const Args& a,
                 const Stream& s) { paged::paged_write_(a.outputs[0], a.inputs[0], a.inputs[1], s); },
      .in_place = true,
      .takes_big = false,
  });
  return rows;
}

const std::vector<OpRow>& paged_rows() {
  static const std::vector<OpRow> rows = make_rows();
  return rows;
}

RUDNN_OP_CONTRACT_SUITE(PagedContract, paged_rows);

}  // namespace
}  // namespace rudnn::test
