// The tensor-core MLA kernel (R = 512, P = 64, F16/BF16: paged_attention/cuda/mla_tc.cuh)
// against the float64 CPU reference: page sizes 1, 16, 64 and odd ones, sequences of length
// 0 and 1 and odd lengths, decode and causal prefill rows (several queries of one sequence in
// one block), H not a multiple of the block's 64 rows, the internal split of a long history,
// caller workspaces (reused: the same bits), the _into form over a poisoned output. Every
// allocation is poisoned (NaN bytes); inputs are checked unchanged. Without a CUDA device
// every test is skipped; without the kernel's arch (sm_80 code and 225 KiB of shared memory
// per block) too.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "paged_util.h"
#include "support/poison.h"
#include "support/test_support.h"

// The kernel's switches (paged_attention/cuda/mla_tc.h) are reachable in CUDA builds only.
#if RUDNN_PAGED_TUNING
#include "paged_attention/cuda/mla_tc.h"

namespace rudnn::test {
namespace {

using paged_util::random_schedule;
using paged_util::Schedule;
using paged_util::ScheduleOptions;

constexpr Device kGpu = Device::cuda(0);
constexpr int64_t kRank = 512, kPos = 64;

// Skips when the device does not run the tensor-core kernel (the general one would answer,
// which test_gpu.cpp covers), or its warpgroup-MMA form (sm_90a code on a Hopper).
#define RUDNN_REQUIRE_MLA_TC(wgmma)                                                           \
  do {                                                                                        \
    RUDNN_REQUIRE_CUDA();                                                                     \
    if (!paged::cuda::mla_tc_usable(current_stream(kGpu)))                                    \
      GTEST_SKIP() << "the device lacks the tensor-core MLA kernel (sm_80+ code and 225 "     \
                      "KiB of shared memory per block: sm_90)";                               \
    if ((wgmma) && !paged::cuda::mla_tc_wgmma_usable(current_stream(kGpu)))                   \
      GTEST_SKIP() << "the build or device lacks the wgmma MLA kernel (sm_90a code, Hopper)"; \
  } while (0)

// Runs the kernel's mma.sync or wgmma form for a scope.
class FormGuard {
 public:
  explicit FormGuard(bool wgmma) : saved_(paged::cuda::mla_tuning().wgmma) {
    paged::cuda::mla_tuning().wgmma = wgmma;
  }
  ~FormGuard() { paged::cuda::mla_tuning().wgmma = saved_; }
  FormGuard(const FormGuard&) = delete;
  FormGuard& operator=(const FormGuard&) = delete;

 private:
  bool saved_;
};

// Each case twice: PagedMlaTc.<name> on mma.sync, PagedMlaTcWgmma.<name> on wgmma (the
// suites run one after the other, mma.sync first).
#define MLA_TC_TEST(name)                     \
  void name##_body(Rng& rng);                 \
  TEST(PagedMlaTc, name) {                    \
    RUDNN_REQUIRE_MLA_TC(false);              \
    const FormGuard form(false);              \
    RUDNN_SEEDED_RNG(rng);                    \
    {                                         \
      SCOPED_TRACE("kernel form mma.sync"); \
      name##_body(rng);                       \
    }                                         \
  }                                           \
  TEST(PagedMlaTcWgmma, name) {               \
    RUDNN_REQUIRE_MLA_TC(true);               \
    const FormGuard form(true);               \
    RUDNN_SEEDED_RNG(rng);                    \
    {                                         \
      SCOPED_TRACE("kernel form wgmma"); \
      name##_body(rng);                       \
    }                                         \
  }                                           \
  void name##_body(Rng& rng)

enum class Form { plain, into, workspace };

const char* form_name(Form f) {
  return f == Form::plain ? "mla" : (f == Form::into ? "mla_into" : "mla_with_workspace");
}

// A schedule with these sequence lengths (pages scattered, one spare table entry on odd
// sequences), `chunk[i]` queries at the end of sequence i (0: none).
Schedule fixed_schedule(Rng& rng, int64_t page_size, const std::vector<int64_t>& lengths,
                        const std::vector<int64_t>& chunk) {
  Schedule s;
  s.page_size = page_size;
  int64_t needed = 0;
  for (size_t i = 0; i < lengths.size(); ++i)
    needed += (lengths[i] + page_size - 1) / page_size + static_cast<int64_t>(i % 2);
  s.pages = needed + 2;
  std::vector<int64_t> perm(static_cast<size_t>(s.pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng.engine());
  size_t next = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t n = (lengths[i] + page_size - 1) / page_size + static_cast<int64_t>(i % 2);
    std::vector<int64_t> table;
    for (int64_t k = 0; k < n; ++k) table.push_back(perm[next++]);
    s.tables.push_back(table);
    s.lengths.push_back(lengths[i]);
    const int64_t c = std::min(chunk[i], lengths[i]);
    for (int64_t p = lengths[i] - c; p < lengths[i]; ++p) {
      s.seq_ids.push_back(static_cast<int64_t>(i));
      s.positions.push_back(p);
    }
  }
  return s;
}

void check_mla(Rng& rng, const Schedule& s, int64_t heads, DType dtype, bool causal, Form form,
               int64_t splits = 0) {
  SCOPED_TRACE(s.str() + "; H " + std::to_string(heads) + " R 512 P 64 " + dtype_name(dtype) +
               (causal ? " causal " : " full ") + form_name(form) +
               (splits ? " splits " + std::to_string(splits) : ""));
  Tensor q = random_tensor(rng, {s.queries(), heads, kRank}, dtype);
  Tensor qp = random_tensor(rng, {s.queries(), heads, kPos}, dtype);
  Tensor lat = random_tensor(rng, {s.pages, s.page_size, 1, kRank}, dtype);
  Tensor kp = random_tensor(rng, {s.pages, s.page_size, 1, kPos}, dtype);
  const float scale = 1.0f / std::sqrt(static_cast<float>(kRank + kPos));
  const auto host = s.host();
  Tensor want = paged::DevicePlan::upload(host, q).mla(q, qp, lat, kp, scale, causal);
  Tensor qg = q.to(kGpu), qpg = qp.to(kGpu), latg = lat.to(kGpu), kpg = kp.to(kGpu);
  const auto plan = paged::DevicePlan::upload(host, qg);
  Tensor got;
  switch (form) {
    case Form::plain:
      got = plan.mla(qg, qpg, latg, kpg, scale, causal);
      break;
    case Form::into:
      got = Tensor::empty({s.queries(), heads, kRank}, dtype, kGpu);  // poisoned
      plan.mla_into(got, qg, qpg, latg, kpg, scale, causal);
      break;
    case Form::workspace: {
      paged::SplitWorkspace ws(qg, s.queries(), heads, kRank, splits);
      got = plan.mla_with_workspace(ws, qg, qpg, latg, kpg, scale, causal);
      Tensor again = plan.mla_with_workspace(ws, qg, qpg, latg, kpg, scale, causal);
      EXPECT_TRUE(bit_equal(got, again)) << "a reused workspace gave other bits";
      break;
    }
  }
  EXPECT_TRUE(all_close(got, want));
  EXPECT_TRUE(bit_equal(qg, q));
  EXPECT_TRUE(bit_equal(qpg, qp));
  EXPECT_TRUE(bit_equal(latg, lat));
  EXPECT_TRUE(bit_equal(kpg, kp));
}

MLA_TC_TEST(DecodeMatchesTheReference) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (int64_t page_size : {1, 16, 64, 13}) {
      for (int64_t heads : {16, 64, 128, 20}) {
        // Lengths 0 and 1, odd lengths, one over several key tiles.
        const Schedule s = fixed_schedule(rng, page_size, {0, 1, 37, 200, 129, 64},
                                          {1, 1, 1, 1, 1, 1});
        check_mla(rng, s, heads, dtype, true, Form::plain);
      }
    }
  }
}

MLA_TC_TEST(RandomSchedulesWithPrefillMatchTheReference) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (int64_t page_size : {1, 16, 64, 7}) {
      for (int64_t heads : {16, 128, 3}) {
        ScheduleOptions o;
        o.sequences = heads >= 128 ? 3 : 6;
        o.max_len = heads >= 128 ? 150 : 300;
        o.max_chunk = heads >= 128 ? 4 : 12;
        o.shared_prefix = page_size == 16;
        o.shuffle_queries = page_size == 64;
        const Schedule s = random_schedule(rng, page_size, o);
        check_mla(rng, s, heads, dtype, true, Form::plain);
        check_mla(rng, s, heads, dtype, false, page_size == 7 ? Form::into : Form::plain);
      }
    }
  }
}

MLA_TC_TEST(WorkspacesAndTheIntoFormMatchTheReference) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (int64_t splits : {2, 5, 32}) {
      ScheduleOptions o;
      o.sequences = 5;
      o.max_len = 700;
      o.max_chunk = 3;
      const Schedule s = random_schedule(rng, 16, o);
      check_mla(rng, s, 64, dtype, true, Form::workspace, splits);
      check_mla(rng, s, 16, dtype, false, Form::workspace, splits);
    }
    const Schedule s = fixed_schedule(rng, 64, {0, 1, 300}, {1, 1, 5});
    check_mla(rng, s, 128, dtype, true, Form::into);
  }
}

// Long single-sequence histories: the internal split (scratch records and the merge).
MLA_TC_TEST(LongHistoriesSplitInternally) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (int64_t page_size : {16, 64}) {
      const Schedule s = fixed_schedule(rng, page_size, {2500, 1777}, {1, 1});
      check_mla(rng, s, 128, dtype, true, Form::plain);
    }
    const Schedule s = fixed_schedule(rng, 1, {3001}, {2});
    check_mla(rng, s, 64, dtype, true, Form::plain);
  }
}

// Large logits (a scale that makes each softmax nearly one-hot): the running max rescales.
MLA_TC_TEST(LargeLogitsStayFinite) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    const Schedule s = fixed_schedule(rng, 16, {300, 90}, {1, 3});
    SCOPED_TRACE(s.str() + "; H 64 " + dtype_name(dtype) + " scale 2");
    Tensor q = random_tensor(rng, {s.queries(), 64, kRank}, dtype);
    Tensor qp = random_tensor(rng, {s.queries(), 64, kPos}, dtype);
    Tensor lat = random_tensor(rng, {s.pages, s.page_size, 1, kRank}, dtype);
    Tensor kp = random_tensor(rng, {s.pages, s.page_size, 1, kPos}, dtype);
    Tensor want = paged::DevicePlan::upload(s.host(), q).mla(q, qp, lat, kp, 2.0f, true);
    const auto plan = paged::DevicePlan::upload(s.host(), q.to(kGpu));
    Tensor got = plan.mla(q.to(kGpu), qp.to(kGpu), lat.to(kGpu), kp.to(kGpu), 2.0f, true);
    EXPECT_TRUE(all_close(got, want));
  }
}

}  // namespace
}  // namespace rudnn::test

#endif  // RUDNN_PAGED_TUNING
