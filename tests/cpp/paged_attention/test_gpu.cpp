// The paged family on the GPU against the CPU reference (the same inputs on the CPU):
// random schedules (mixed prefill and decode, empty sequences, shared-prefix pages, queries
// interleaved), page sizes 1/16/64/256, every dtype, head sizes on and off the vector
// paths, MLA, split workspaces against the unsplit call, the internal split of long
// histories, dense attention over the same keys, the block-table form's clamping, cache
// writes, and device / stream errors. Every allocation is poisoned (NaN bytes); inputs are
// checked unchanged. Without a CUDA device every test is skipped.
#include <string>
#include <vector>

#include "paged_util.h"
#include "support/poison.h"
#include "support/test_support.h"

#if RUDNN_PAGED_TUNING
#include "paged_attention/cuda/tuning.h"
#endif

namespace rudnn::test {
namespace {

using paged_util::random_schedule;
using paged_util::Schedule;
using paged_util::ScheduleOptions;

constexpr Device kGpu = Device::cuda(0);

struct Heads {
  int64_t hq, hkv, d, dv;
  std::string str() const {
    return "Hq " + std::to_string(hq) + " Hkv " + std::to_string(hkv) + " D " + std::to_string(d) +
           " Dv " + std::to_string(dv);
  }
};

// GPU attention (and, with `splits`, the workspace form) against the reference.
void check_attention(Rng& rng, const Schedule& s, const Heads& h, DType dtype, bool causal,
                     int64_t splits = 0) {
  SCOPED_TRACE(s.str() + "; " + h.str() + " " + dtype_name(dtype) + (causal ? " causal" : " full") +
               (splits ? " splits " + std::to_string(splits) : ""));
  Tensor q = random_tensor(rng, {s.queries(), h.hq, h.d}, dtype);
  Tensor k = random_tensor(rng, {s.pages, s.page_size, h.hkv, h.d}, dtype);
  Tensor v = random_tensor(rng, {s.pages, s.page_size, h.hkv, h.dv}, dtype);
  const float scale = 1.0f / std::sqrt(static_cast<float>(h.d));
  const auto host = s.host();
  Tensor want = paged::DevicePlan::upload(host, q).attention(q, k, v, scale, causal);
  Tensor qg = q.to(kGpu), kg = k.to(kGpu), vg = v.to(kGpu);
  const auto plan = paged::DevicePlan::upload(host, qg);
  Tensor got;
  if (splits > 0) {
    paged::SplitWorkspace ws(qg, s.queries(), h.hq, h.dv, splits);
    got = plan.attention_with_workspace(ws, qg, kg, vg, scale, causal);
    // The workspace is reusable: a second call gives the same bits.
    Tensor again = plan.attention_with_workspace(ws, qg, kg, vg, scale, causal);
    EXPECT_TRUE(bit_equal(got, again));
  } else {
    got = plan.attention(qg, kg, vg, scale, causal);
  }
  EXPECT_TRUE(all_close(got, want));
  EXPECT_TRUE(bit_equal(qg, q));
  EXPECT_TRUE(bit_equal(kg, k));
  EXPECT_TRUE(bit_equal(vg, v));
}

TEST(PagedGpu, AttentionMatchesTheReferenceOverRandomSchedules) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Heads heads[] = {{32, 8, 128, 128}, {4, 4, 64, 64},  {6, 2, 5, 7},
                         {8, 1, 200, 96},   {2, 2, 600, 300}, {3, 1, 1024, 1024}};
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (int64_t page_size : {1, 16, 64, 256}) {
      for (const Heads& h : heads) {
        ScheduleOptions o;
        o.sequences = h.d >= 600 ? 3 : 6;
        o.max_len = page_size == 256 ? 600 : 150;
        o.shared_prefix = page_size == 16;
        o.shuffle_queries = page_size == 64;
        const Schedule s = random_schedule(rng, page_size, o);
        check_attention(rng, s, h, dtype, true);
        if (page_size == 16) check_attention(rng, s, h, dtype, false);
      }
    }
  }
}

// Decode schedules (one query per sequence) with D = Dv in {64, 128, 256} and Hq / Hkv in
// {1, 2, 4, 8} run the decode kernel (the others the general one): every combination,
// unsplit, with the internal split, and with workspaces.
TEST(PagedGpu, DecodeKernelMatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
#if RUDNN_PAGED_TUNING
  struct Restore {
    paged::cuda::KernelTuning saved = paged::cuda::kernel_tuning();
    ~Restore() { paged::cuda::kernel_tuning() = saved; }
  } restore;
  // Every launch variant of the decode kernel, and the general kernel on decode shapes.
  // (F32 runs the CUDA-core decode kernel in the tensor-core variants.)
  const char* names[] = {"tensor-core decode, 3 stages", "tensor-core decode, 4 stages",
                         "tensor-core decode, 2 stages",
                         "CUDA-core decode pipelined, min blocks 1",
                         "CUDA-core decode pipelined, min blocks 3",
                         "CUDA-core decode burst, min blocks 1", "general kernel"};
  for (int variant = 0; variant < 7; ++variant) {
    paged::cuda::kernel_tuning() = restore.saved;
    paged::cuda::kernel_tuning().decode_tensor_cores = variant <= 2;
    paged::cuda::kernel_tuning().decode_stages = variant == 1 ? 4 : (variant == 2 ? 2 : 3);
    paged::cuda::kernel_tuning().decode_min_blocks = variant == 4 ? 3 : 1;
    paged::cuda::kernel_tuning().decode_pipelined = variant != 5;
    paged::cuda::kernel_tuning().decode_kernel = variant != 6;
    SCOPED_TRACE(names[variant]);
#endif
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      for (int64_t d : {64, 128, 256}) {
        for (int64_t group : {1, 2, 4, 8}) {
          ScheduleOptions o;
          o.sequences = 5;
          o.max_len = group == 4 ? 3000 : 300;
          o.decode_share = 1.0;
          o.shuffle_queries = group == 2;
          const int64_t page_size = d == 64 ? 1 : (d == 128 ? 16 : 64);
          const Schedule s = random_schedule(rng, page_size, o);
          const Heads h{2 * group, 2, d, d};
          check_attention(rng, s, h, dtype, true);
          if (group == 8) check_attention(rng, s, h, dtype, false);
          if (group == 4) check_attention(rng, s, h, dtype, true, 3);
        }
      }
    }
#if RUDNN_PAGED_TUNING
  }
#endif
}

// The tensor-core decode kernel (F16 / BF16 decode schedules) over random schedules: page
// sizes 1 .. 256 (powers of two and not), odd lengths (tiles cut short), Hq / Hkv of 1, 4 and
// 8, causal and full, unsplit, the internal split and workspaces of 2 and 5 splits.
TEST(PagedGpu, TensorCoreDecodeMatchesTheReferenceOverRandomSchedules) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dtype : {DType::f16, DType::bf16}) {
    for (int64_t page_size : {1, 3, 16, 37, 64, 256}) {
      for (int64_t d : {64, 128, 256}) {
        for (int64_t group : {1, 4, 8}) {
          ScheduleOptions o;
          o.sequences = 4;
          o.max_len = 2 * rng.integer(1, 900) + 1;
          o.decode_share = 1.0;
          o.shuffle_queries = group == 4;
          o.shared_prefix = page_size == 16;
          const Schedule s = random_schedule(rng, page_size, o);
          const Heads h{2 * group, 2, d, d};
          const bool causal = rng.integer(0, 1) == 1;
          check_attention(rng, s, h, dtype, causal);
          check_attention(rng, s, h, dtype, causal, group == 8 ? 5 : 2);
        }
      }
    }
  }
}

#if RUDNN_PAGED_TUNING
// The tensor-core decode kernel with several KV heads per block (KernelTuning::
// decode_heads_per_block; the most of 4, 2, 1 that divides Hkv is taken) and the grid taking
// the head groups or the splits fastest: Hkv of 8, 4, 6 (two heads per block) and 3 (one),
// GQA 1 / 4 / 8, random page sizes and odd lengths, unsplit, the internal split (by blocks
// per multiprocessor or in waves) and workspaces.
TEST(PagedGpu, TensorCoreDecodeSeveralHeadsPerBlock) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  struct Restore {
    paged::cuda::KernelTuning saved = paged::cuda::kernel_tuning();
    ~Restore() { paged::cuda::kernel_tuning() = saved; }
  } restore;
  for (int heads_per_block : {4, 2}) {
    for (bool heads_fastest : {false, true}) {
      paged::cuda::kernel_tuning() = restore.saved;
      paged::cuda::kernel_tuning().decode_tensor_cores = true;
      paged::cuda::kernel_tuning().decode_heads_per_block = heads_per_block;
      paged::cuda::kernel_tuning().decode_heads_fastest = heads_fastest;
      // The splits sized in waves (KernelTuning::decode_waves) with the heads-fastest grid.
      paged::cuda::kernel_tuning().decode_waves = heads_fastest ? 1 : 0;
      SCOPED_TRACE("heads per block <= " + std::to_string(heads_per_block) +
                   (heads_fastest ? ", heads fastest, 1 wave" : ", splits fastest"));
      for (int64_t hkv : {8, 4, 6, 3}) {
        for (int64_t group : {1, 4, 8}) {
          const DType dtype = rng.integer(0, 1) == 1 ? DType::bf16 : DType::f16;
          const int64_t page_size = rng.integer(0, 1) == 1 ? 16 : rng.integer(1, 256);
          const int64_t d = group == 4 ? 128 : (group == 1 ? 64 : 256);
          ScheduleOptions o;
          o.sequences = 3;
          o.max_len = 2 * rng.integer(1, 1200) + 1;
          o.decode_share = 1.0;
          o.shuffle_queries = group == 4;
          const Schedule s = random_schedule(rng, page_size, o);
          const Heads h{hkv * group, hkv, d, d};
          const bool causal = rng.integer(0, 1) == 1;
          check_attention(rng, s, h, dtype, causal);
          check_attention(rng, s, h, dtype, causal, group == 8 ? 3 : 2);
        }
      }
    }
  }
}
#endif

// Decode batches with long histories take the internal split (few blocks, many keys).
TEST(PagedGpu, LongHistoriesSplitInternally) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  ScheduleOptions o;
  o.sequences = 3;
  o.max_len = 9000;
  o.decode_share = 1.0;
  o.empty_share = 0.0;
  const Schedule s = random_schedule(rng, 16, o);
  for (DType dtype : {DType::f32, DType::bf16}) {
    check_attention(rng, s, {8, 2, 128, 128}, dtype, true);
    check_attention(rng, s, {4, 1, 72, 40}, dtype, false);
  }
}

TEST(PagedGpu, SplitWorkspaceMatchesTheReferenceAndTheUnsplitCall) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  ScheduleOptions o;
  o.max_len = 2000;
  const Schedule s = random_schedule(rng, 16, o);
  for (int64_t splits : {2, 7, 32}) {
    check_attention(rng, s, {8, 2, 128, 128}, DType::bf16, true, splits);
    check_attention(rng, s, {3, 3, 33, 65}, DType::f32, false, splits);
  }
  // Split and unsplit within FP32 rounding (f32 in and out).
  SCOPED_TRACE(s.str());
  Tensor q = random_tensor(rng, {s.queries(), 4, 64}, DType::f32).to(kGpu);
  Tensor k = random_tensor(rng, {s.pages, 16, 2, 64}, DType::f32).to(kGpu);
  Tensor v = random_tensor(rng, {s.pages, 16, 2, 64}, DType::f32).to(kGpu);
  const auto plan = paged::DevicePlan::upload(s.host(), q);
  paged::SplitWorkspace ws(q, s.queries(), 4, 64, 5);
  EXPECT_TRUE(all_close(plan.attention_with_workspace(ws, q, k, v, 0.125f, true),
                        plan.attention(q, k, v, 0.125f, true), 2e-6));
}

TEST(PagedGpu, EqualsDenseAttentionOverTheSameKeys) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  ScheduleOptions o;
  o.sequences = 5;
  o.max_len = 300;
  o.shuffle_queries = true;
  const Schedule s = random_schedule(rng, 16, o);
  SCOPED_TRACE(s.str());
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor q = random_tensor(rng, {s.queries(), 8, 128}, dtype).to(kGpu);
    Tensor k = random_tensor(rng, {s.pages, 16, 2, 128}, dtype).to(kGpu);
    Tensor v = random_tensor(rng, {s.pages, 16, 2, 128}, dtype).to(kGpu);
    const auto plan = paged::DevicePlan::upload(s.host(), q);
    for (bool causal : {true, false}) {
      Tensor got = plan.attention(q, k, v, 0.088f, causal);
      Tensor dense = paged_util::dense_equivalent(s, q, k, v, 0.088f, causal, kGpu);
      EXPECT_TRUE(all_close(got, dense)) << dtype_name(dtype) << (causal ? " causal" : " full");
    }
  }
}

TEST(PagedGpu, MlaMatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  struct Case {
    int64_t heads, rank, pos, page_size, splits;
  };
  const Case cases[] = {{16, 512, 64, 16, 0}, {4, 512, 64, 64, 4}, {3, 40, 7, 1, 0},
                        {2, 1024, 256, 16, 0}, {128, 512, 64, 16, 0}};
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (const Case& c : cases) {
      ScheduleOptions o;
      o.sequences = c.heads >= 128 ? 2 : 4;
      o.max_len = 400;
      const Schedule s = random_schedule(rng, c.page_size, o);
      SCOPED_TRACE(s.str() + "; H " + std::to_string(c.heads) + " R " + std::to_string(c.rank) +
                   " P " + std::to_string(c.pos) + " " + dtype_name(dtype) + " splits " +
                   std::to_string(c.splits));
      Tensor q = random_tensor(rng, {s.queries(), c.heads, c.rank}, dtype);
      Tensor qp = random_tensor(rng, {s.queries(), c.heads, c.pos}, dtype);
      Tensor lat = random_tensor(rng, {s.pages, c.page_size, 1, c.rank}, dtype);
      Tensor kp = random_tensor(rng, {s.pages, c.page_size, 1, c.pos}, dtype);
      const float scale = 0.07f;
      const auto host = s.host();
      Tensor want = paged::DevicePlan::upload(host, q).mla(q, qp, lat, kp, scale, true);
      Tensor qg = q.to(kGpu), qpg = qp.to(kGpu), latg = lat.to(kGpu), kpg = kp.to(kGpu);
      const auto plan = paged::DevicePlan::upload(host, qg);
      Tensor got;
      if (c.splits > 0) {
        paged::SplitWorkspace ws(qg, s.queries(), c.heads, c.rank, c.splits);
        got = plan.mla_with_workspace(ws, qg, qpg, latg, kpg, scale, true);
      } else {
        got = plan.mla(qg, qpg, latg, kpg, scale, true);
      }
      EXPECT_TRUE(all_close(got, want));
      EXPECT_TRUE(bit_equal(latg, lat));
    }
  }
}

TEST(PagedGpu, BlockTableFormMatchesTheReferenceAndClamps) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType index : {DType::i32, DType::i64}) {
    for (int64_t bs : {1, 16, 256}) {
      // L = 1 runs the decode kernel, L = 3 the general one.
      const int64_t batch = 4, len_q = bs == 16 ? 1 : 3, hq = 8, hkv = 2, d = 128;
      const int64_t blocks = 40 / bs + 3;
      const int64_t max_blocks = 300 / bs + 1;
      SCOPED_TRACE("block_size " + std::to_string(bs) + " " + dtype_name(index));
      Tensor q = random_tensor(rng, {batch, hq, len_q, d}, DType::bf16);
      Tensor k = random_tensor(rng, {blocks, hkv, bs, d}, DType::bf16);
      Tensor v = random_tensor(rng, {blocks, hkv, bs, d}, DType::bf16);
      // Ids from -3 to blocks + 3 and lengths from -2 to past the capacity.
      Tensor tables = random_integers(rng, {batch, max_blocks}, index, -3, blocks + 3);
      Tensor lengths = random_integers(rng, {batch}, index, -2, max_blocks * bs + 50);
      Tensor want = paged::paged_attention(q, k, v, tables, lengths, 0.09f);
      Tensor got = paged::paged_attention(q.to(kGpu), k.to(kGpu), v.to(kGpu), tables.to(kGpu),
                                          lengths.to(kGpu), 0.09f);
      EXPECT_TRUE(all_close(got, want));
    }
  }
}

TEST(PagedGpu, CacheWritesMatchTheCpu) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  ScheduleOptions o;
  o.shuffle_queries = true;
  const Schedule s = random_schedule(rng, 16, o);
  SCOPED_TRACE(s.str());
  for (DType dtype : {DType::f32, DType::f16}) {
    Tensor kc = random_tensor(rng, {s.pages, 16, 2, 24}, dtype);
    Tensor vc = random_tensor(rng, {s.pages, 16, 2, 8}, dtype);
    Tensor k = random_tensor(rng, {s.queries(), 2, 24}, dtype);
    Tensor v = random_tensor(rng, {s.queries(), 2, 8}, dtype);
    Tensor kcg = kc.to(kGpu), vcg = vc.to(kGpu);
    paged::DevicePlan::upload(s.host(), k).append(k, v, kc, vc);
    paged::DevicePlan::upload(s.host(), kcg).append(k.to(kGpu), v.to(kGpu), kcg, vcg);
    EXPECT_TRUE(bit_equal(kcg, kc));
    EXPECT_TRUE(bit_equal(vcg, vc));

    Tensor cache = random_tensor(rng, {5, 2, 4, 24}, dtype);
    Tensor fresh = random_tensor(rng, {6, 2, 24}, dtype);
    Tensor slots = Tensor::from_host(std::vector<int64_t>{3, -1, 19, 20, 0, 7}, {6});
    Tensor want = paged::paged_write(cache, fresh, slots);
    Tensor cg = cache.to(kGpu);
    Tensor got = paged::paged_write(cg, fresh.to(kGpu), slots.to(kGpu));
    EXPECT_TRUE(bit_equal(got, want));
    EXPECT_TRUE(bit_equal(cg, cache));
    paged::paged_write_(cg, fresh.to(kGpu), slots.to(kGpu));
    EXPECT_TRUE(bit_equal(cg, want));
  }
}

TEST(PagedGpu, DeviceAndStreamErrors) {
  RUDNN_REQUIRE_CUDA();
  const paged::HostPlan host(4, 2, {{0, 1}}, {5}, {0}, {4});
  Tensor q = Tensor::zeros({1, 2, 8}, DType::f32, kGpu);
  Tensor k = Tensor::zeros({2, 4, 1, 8}, DType::f32, kGpu);
  const auto plan = paged::DevicePlan::upload(host, q);
  EXPECT_TRUE(throws_error([&] { plan.attention(q, k.to(Device::cpu()), k, 1.0f, true); },
                           ErrorCode::DeviceMismatch, {"k_cache is on cpu"}));
  EXPECT_TRUE(throws_error([&] { plan.attention(q.to(Device::cpu()), k, k, 1.0f, true); },
                           ErrorCode::DeviceMismatch, {"attention"}));
  const Stream other = Stream::create(kGpu);
  other.wait(current_stream(kGpu));  // q and k were made on the current stream
  paged::SplitWorkspace ws(q, 1, 2, 8, 2, other);
  EXPECT_TRUE(throws_error([&] { plan.attention_with_workspace(ws, q, k, k, 1.0f, true); },
                           ErrorCode::InvalidArgument, {"another stream"}));
  EXPECT_TRUE(throws_error([&] { paged::SplitWorkspace(q, 1, 2, 8, 2, Stream::cpu()); },
                           ErrorCode::DeviceMismatch, {"SplitWorkspace"}));
  // The plan's stream is the one every call runs on.
  const auto plan_other = paged::DevicePlan::upload(host, q, other);
  EXPECT_TRUE(plan_other.stream() == other);
  Tensor out = plan_other.attention(q, k, k, 1.0f, true);
  other.synchronize();
  EXPECT_TRUE(all_close(out.to_host(), paged::DevicePlan::upload(host, q.to_host())
                                           .attention(q.to_host(), k.to_host(), k.to_host(), 1.0f,
                                                      true)));
}

}  // namespace
}  // namespace rudnn::test
