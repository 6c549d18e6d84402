// The contract checks over a table of ops: see op_contract.h.
#include "support/op_contract.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <tuple>

#if RUDNN_TEST_CUDA
#include <cuda_runtime_api.h>
#endif

namespace rudnn::test::contract {

namespace {

// Small enough to keep the CPU suite fast, and a row length that is no multiple of the
// kernels' vector widths, so that the tail paths run too.
constexpr int64_t kRows = 6;
constexpr int64_t kCols = 200;

size_t nbytes(const Tensor& t) { return static_cast<size_t>(t.numel()) * t.itemsize(); }

std::string describe(const ContractCase& c) {
  return c.row->name + " on " + c.device.str() + ", " + dtype_name(c.dtype);
}

// The arguments on `device`: inputs copied (so the host originals stay as they were), outputs
// NaN bytes (poisoned) or, for an in-place op, copies of their values. Ready for any stream.
Args upload(const OpRow& row, const Args& host, Device device) {
  Args a;
  for (const Tensor& t : host.inputs) a.inputs.push_back(t.defined() ? t.to(device) : Tensor());
  for (const Tensor& t : host.outputs) {
    a.outputs.push_back(!t.defined()   ? Tensor()
                        : row.in_place ? t.to(device)
                                       : poisoned(t.shape(), t.dtype(), device));
  }
  if (device.is_cuda())
    current_stream(device).synchronize();  // the uploads, before other streams use them
  return a;
}

// The CPU reference: the _into form on host copies of the arguments.
std::vector<Tensor> reference(const OpRow& row, const Args& host) {
  const Args a = upload(row, host, Device::cpu());
  row.into(a, Stream());
  return a.outputs;
}

// `input`: the case's dtype, whose tolerance an F32 output gets when the row asks for it
// (f32_outputs_at_input_precision); otherwise each output's own.
::testing::AssertionResult outputs_match(const std::vector<Tensor>& got,
                                         const std::vector<Tensor>& expected,
                                         const OpRow& row, DType input) {
  if (got.size() != expected.size()) {
    return ::testing::AssertionFailure() << got.size() << " outputs, expected " << expected.size();
  }
  for (size_t j = 0; j < got.size(); ++j) {
    if (!expected[j].defined()) continue;
    if (!got[j].defined())
      return ::testing::AssertionFailure() << "output " << j << " is undefined";
    const bool at_input = row.f32_outputs_at_input_precision && expected[j].dtype() == DType::f32;
    const auto close =
        all_close(got[j], expected[j], tolerance(at_input ? input : expected[j].dtype()));
    if (!close) return ::testing::AssertionFailure() << "output " << j << ": " << close.message();
  }
  return ::testing::AssertionSuccess();
}

// fn throws a rudnn::Error whose message starts with "<op>: " and contains `fragment`.
::testing::AssertionResult fails_naming(const std::string& op, const std::function<void()>& fn,
                                        const std::string& fragment = "") {
  try {
    fn();
  } catch (const Error& e) {
    const std::string message = e.what();
    if (message.rfind(op + ": ", 0) != 0) {
      return ::testing::AssertionFailure()
             << "message does not start with \"" << op << ": \": " << message;
    }
    if (message.find(fragment) == std::string::npos) {
      return ::testing::AssertionFailure() << "message lacks \"" << fragment << "\": " << message;
    }
    return ::testing::AssertionSuccess() << message;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-rudnn exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

// A call of the op with exactly one argument broken.
struct BadCall {
  std::string what;  // "gamma undefined", "out has dtype i32"
  Args args;
  bool functional_too;  // the broken argument is one the functional form takes too
};

// An argument the op must refuse, for each operand in turn: undefined (unless optional), a
// dtype it refuses, a shape it refuses, and on a GPU a tensor left on the CPU.
std::vector<BadCall> bad_calls(const OpRow& row, const Args& valid, Device device) {
  std::vector<BadCall> calls;
  auto breakages = [&](const Operand& operand, const Tensor& t, auto&& replace, bool is_input) {
    if (!t.defined()) return;
    auto add = [&](const std::string& what, const Tensor& bad, bool functional_too) {
      BadCall call{operand.name + " " + what, valid, functional_too && is_input};
      replace(call.args, bad);
      calls.push_back(std::move(call));
    };
    if (!operand.optional) add("undefined", Tensor(), true);
    add(std::string("of dtype ") + dtype_name(operand.rejected_dtype),
        Tensor::zeros(t.shape(), operand.rejected_dtype, device), true);
    if (operand.rejected_shape) {
      add("of shape " + shape_str(*operand.rejected_shape),
          Tensor::zeros(*operand.rejected_shape, t.dtype(), device), true);
    }
    if (device.is_cuda()) {
      // The functional form of a one-input op runs wherever that input is: no mismatch then.
      const bool other_inputs = std::count_if(valid.inputs.begin(), valid.inputs.end(),
                                              [](const Tensor& u) { return u.defined(); }) > 1;
      add("on the CPU", Tensor::zeros(t.shape(), t.dtype(), Device::cpu()), other_inputs);
    }
  };
  for (size_t i = 0; i < row.inputs.size() && i < valid.inputs.size(); ++i) {
    breakages(
        row.inputs[i], valid.inputs[i], [i](Args& a, const Tensor& bad) { a.inputs[i] = bad; },
        true);
  }
  for (size_t j = 0; j < row.outputs.size() && j < valid.outputs.size(); ++j) {
    breakages(
        row.outputs[j], valid.outputs[j], [j](Args& a, const Tensor& bad) { a.outputs[j] = bad; },
        false);
  }
  return calls;
}

// Two tensors over one buffer on `device`, the first holding `values`' elements, the second
// with `like`'s shape and dtype: they overlap from their first byte.
std::pair<Tensor, Tensor> sharing_memory(const Tensor& values, const Tensor& like, Device device) {
  const size_t bytes = std::max(nbytes(values), nbytes(like));
  const Tensor buffer = Tensor::zeros({static_cast<int64_t>(bytes)}, DType::u8, device);
  auto view = [&](const Tensor& t) {
    return Tensor::from_blob(buffer.data(), bytes, t.shape(), contiguous_strides(t.shape()), 0,
                             t.dtype(), device, [buffer] {});
  };
  const Tensor first = view(values);
  first.copy_from(values);
  if (device.is_cuda()) current_stream(device).synchronize();
  return {first, view(like)};
}

bool skip_without_device(const ContractCase& c) { return c.device.is_cuda() && !cuda_available(); }

}  // namespace

std::vector<ContractCase> contract_cases(const std::vector<OpRow>& rows, bool gpu_only,
                                         std::vector<DType> dtypes) {
  std::vector<ContractCase> cases;
  for (const OpRow& row : rows) {
    for (Device device : {Device::cpu(), Device::cuda(0)}) {
      if ((gpu_only && device.is_cpu()) || (row.cpu_only && device.is_cuda())) continue;
      for (DType dtype : dtypes) cases.push_back({&row, device, dtype});
    }
  }
  return cases;
}

std::string contract_case_name(const ::testing::TestParamInfo<ContractCase>& info) {
  const ContractCase& c = info.param;
  return c.row->test_label() + (c.device.is_cuda() ? "_cuda_" : "_cpu_") + dtype_name(c.dtype);
}

void PrintTo(const ContractCase& c, std::ostream* os) { *os << describe(c); }

// ---- Errors ----------------------------------------------------------------------------------

void check_error_names_the_op(const ContractCase& c) {
  if (skip_without_device(c)) GTEST_SKIP() << "no CUDA device: GPU case skipped";
  RUDNN_SEEDED_RNG(rng);
  SCOPED_TRACE(describe(c));
  const OpRow& row = *c.row;
  const Args valid = upload(row, row.make(rng, c.dtype, kRows, kCols), c.device);
  const std::vector<BadCall> calls = bad_calls(row, valid, c.device);
  ASSERT_FALSE(calls.empty());
  for (const BadCall& bad : calls) {
    SCOPED_TRACE(bad.what);
    EXPECT_TRUE(fails_naming(row.name, [&] { row.into(bad.args, Stream()); })) << "_into form";
    if (bad.functional_too && row.functional) {
      EXPECT_TRUE(fails_naming(row.name, [&] { row.functional(bad.args, Stream()); }))
          << "functional form";
    }
  }
}

void check_outputs_untouched_after_error(const ContractCase& c) {
  if (skip_without_device(c)) GTEST_SKIP() << "no CUDA device: GPU case skipped";
  RUDNN_SEEDED_RNG(rng);
  SCOPED_TRACE(describe(c));
  const OpRow& row = *c.row;
  const Args valid = upload(row, row.make(rng, c.dtype, kRows, kCols), c.device);
  std::vector<std::vector<unsigned char>> before;
  for (const Tensor& out : valid.outputs) before.push_back(bytes_of(out));
  for (const BadCall& bad : bad_calls(row, valid, c.device)) {
    SCOPED_TRACE(bad.what);
    ASSERT_TRUE(fails_naming(row.name, [&] { row.into(bad.args, Stream()); }));
    if (c.device.is_cuda())
      current_stream(c.device).synchronize();  // anything queued would land now
    for (size_t j = 0; j < valid.outputs.size(); ++j) {
      // The outputs the bad call was given (a replaced one was never the op's to write).
      const Tensor& given = bad.args.outputs[j];
      if (!given.defined() || given.storage_data() != valid.outputs[j].storage_data()) continue;
      EXPECT_EQ(bytes_of(valid.outputs[j]), before[j]) << row.outputs[j].name << " was written";
    }
  }
}

// ---- Overlap ---------------------------------------------------------------------------------

void check_overlapping_outputs_rejected(const ContractCase& c) {
  if (skip_without_device(c)) GTEST_SKIP() << "no CUDA device: GPU case skipped";
  RUDNN_SEEDED_RNG(rng);
  SCOPED_TRACE(describe(c));
  const OpRow& row = *c.row;
  const Args valid = upload(row, row.make(rng, c.dtype, kRows, kCols), c.device);
  int pairs = 0;
  for (size_t j = 0; j < valid.outputs.size(); ++j) {
    for (size_t i = 0; i < valid.inputs.size(); ++i) {
      if (!valid.inputs[i].defined()) continue;
      SCOPED_TRACE(row.outputs[j].name + " aliasing input " + row.inputs[i].name);
      Args a = valid;
      std::tie(a.inputs[i], a.outputs[j]) =
          sharing_memory(valid.inputs[i], valid.outputs[j], c.device);
      EXPECT_TRUE(fails_naming(
          row.name, [&] { row.into(a, Stream()); }, "overlap"));
      ++pairs;
    }
    for (size_t k = j + 1; k < valid.outputs.size(); ++k) {
      SCOPED_TRACE(row.outputs[k].name + " aliasing output " + row.outputs[j].name);
      Args a = valid;
      std::tie(a.outputs[j], a.outputs[k]) =
          sharing_memory(valid.outputs[j], valid.outputs[k], c.device);
      EXPECT_TRUE(fails_naming(
          row.name, [&] { row.into(a, Stream()); }, "overlap"));
      ++pairs;
    }
  }
  EXPECT_GT(pairs, 0);
}

// ---- Zero rows -------------------------------------------------------------------------------

void check_zero_rows(const ContractCase& c) {
  if (skip_without_device(c)) GTEST_SKIP() << "no CUDA device: GPU case skipped";
  RUDNN_SEEDED_RNG(rng);
  SCOPED_TRACE(describe(c));
  const OpRow& row = *c.row;
  const Args host = row.make(rng, c.dtype, 0, kCols);
  const Args a = upload(row, host, c.device);
  // A row-shaped output is empty; any other output sums over the rows: zeros.
  auto expect_empty_or_zero = [&](const Tensor& got, size_t j, const char* form) {
    SCOPED_TRACE(row.outputs[j].name + std::string(" of the ") + form);
    ASSERT_TRUE(got.defined());
    EXPECT_EQ(got.shape(), host.outputs[j].shape());
    EXPECT_EQ(got.dtype(), host.outputs[j].dtype());
    EXPECT_EQ(got.device(), c.device);
    for (double v : to_doubles(got)) ASSERT_EQ(v, 0.0);
  };
  ASSERT_NO_THROW(row.into(a, Stream()));
  for (size_t j = 0; j < a.outputs.size(); ++j) expect_empty_or_zero(a.outputs[j], j, "_into form");
  if (row.functional) {
    std::vector<Tensor> got;
    ASSERT_NO_THROW(got = row.functional(a, Stream()));
    ASSERT_EQ(got.size(), host.outputs.size());
    for (size_t j = 0; j < got.size(); ++j) expect_empty_or_zero(got[j], j, "functional form");
  }
}

// ---- Inputs ----------------------------------------------------------------------------------

void check_inputs_unchanged(const ContractCase& c) {
  if (skip_without_device(c)) GTEST_SKIP() << "no CUDA device: GPU case skipped";
  RUDNN_SEEDED_RNG(rng);
  SCOPED_TRACE(describe(c));
  const OpRow& row = *c.row;
  const Args a = upload(row, row.make(rng, c.dtype, kRows, kCols), c.device);
  std::vector<std::vector<unsigned char>> before;
  for (const Tensor& t : a.inputs)
    before.push_back(t.defined() ? bytes_of(t) : std::vector<unsigned char>());
  if (row.functional) row.functional(a, Stream());
  row.into(a, Stream());
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    if (a.inputs[i].defined())
      EXPECT_EQ(bytes_of(a.inputs[i]), before[i]) << row.inputs[i].name << " was modified";
  }
}

// ---- Streams ---------------------------------------------------------------------------------

#if RUDNN_TEST_CUDA
namespace {

void expect_cuda(cudaError_t e, const char* what) {
  EXPECT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
}

// Queues a host-side pause on `stream`: work queued after it starts 50 ms later, so work that
// ignores the stream's order runs first and reads stale inputs.
void queue_delay(const Stream& stream) {
  expect_cuda(
      cudaLaunchHostFunc(
          reinterpret_cast<cudaStream_t>(stream.handle()),
          [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }, nullptr),
      "cudaLaunchHostFunc");
}

}  // namespace
#endif

namespace {

// Copies the values of `source` (device tensors) into the inputs of `target` on `stream`, and
// into the outputs of an in-place op (they are its inputs too).
void rewrite_inputs(const OpRow& row, const Args& target, const Args& source,
                    const Stream& stream) {
  for (size_t i = 0; i < target.inputs.size(); ++i) {
    if (target.inputs[i].defined()) target.inputs[i].copy_from(source.inputs[i], stream);
  }
  if (row.in_place) {
    for (size_t j = 0; j < target.outputs.size(); ++j)
      target.outputs[j].copy_from(source.outputs[j], stream);
  }
}

}  // namespace

void check_runs_on_the_given_stream(const ContractCase& c) {
  if (skip_without_device(c)) GTEST_SKIP() << "no CUDA device: GPU case skipped";
  RUDNN_SEEDED_RNG(rng);
  SCOPED_TRACE(describe(c));
  const OpRow& row = *c.row;
  const Args first = row.make(rng, c.dtype, kRows, kCols),
             second = row.make(rng, c.dtype, kRows, kCols);
  const Args a = upload(row, first, c.device);
  if (c.device.is_cpu()) {  // the host stream runs the op inline
    row.into(a, Stream::cpu());
    EXPECT_TRUE(outputs_match(a.outputs, reference(row, first), row, c.dtype));
    if (row.functional)
      EXPECT_TRUE(
          outputs_match(row.functional(a, Stream::cpu()), reference(row, first), row, c.dtype));
    return;
  }
#if RUDNN_TEST_CUDA
  const Args staged = upload(row, second, c.device);
  const Stream stream = Stream::create(c.device);
  // The second inputs reach the op's operands only through the stream's order.
  queue_delay(stream);
  rewrite_inputs(row, a, staged, stream);
  row.into(a, stream);
  std::vector<Tensor> functional;
  if (row.functional) functional = row.functional(a, stream);
  stream.synchronize();  // and nothing else
  const std::vector<Tensor> expected = reference(row, second);
  EXPECT_TRUE(outputs_match(a.outputs, expected, row, c.dtype)) << "_into form";
  if (row.functional) {
    EXPECT_TRUE(outputs_match(functional, expected, row, c.dtype)) << "functional form";
    for (const Tensor& t : functional) {
      if (t.defined())
        EXPECT_EQ(t.allocation_stream(), stream) << "a result allocated on another stream";
    }
  }
#endif
}

// ---- CUDA graphs -----------------------------------------------------------------------------

void check_cuda_graph_capture(const ContractCase& c) {
  RUDNN_REQUIRE_CUDA();
  if (!c.row->not_capturable_because.empty()) {
    GTEST_SKIP() << c.row->test_label()
                 << " is not for graph capture: " << c.row->not_capturable_because;
  }
#if RUDNN_TEST_CUDA
  RUDNN_SEEDED_RNG(rng);
  SCOPED_TRACE(describe(c));
  const OpRow& row = *c.row;
  // A warp tile, a block tile, and a row long enough for the loop and cluster kernels.
  for (int64_t cols : {int64_t{200}, int64_t{8192}, int64_t{40000}}) {
    SCOPED_TRACE("H = " + std::to_string(cols));
    const Args first = row.make(rng, c.dtype, kRows, cols),
               second = row.make(rng, c.dtype, kRows, cols);
    const Args a = upload(row, first, c.device), staged_first = upload(row, first, c.device),
               staged_second = upload(row, second, c.device);
    const Stream stream = Stream::create(c.device);
    const auto native = reinterpret_cast<cudaStream_t>(stream.handle());
    // Puts the outputs back to NaN bytes (in place: to their values of `from`). The NaN
    // sources live through the test: a copy queued on `stream` may still be reading them.
    std::vector<Tensor> nan_outputs;
    for (const Tensor& out : a.outputs)
      nan_outputs.push_back(poisoned(out.shape(), out.dtype(), c.device));
    auto reset_outputs = [&](const Args& from) {
      for (size_t j = 0; j < a.outputs.size(); ++j) {
        a.outputs[j].copy_from(row.in_place ? from.outputs[j] : nan_outputs[j], stream);
      }
    };

    row.into(a, stream);  // eager, and the warm-up: one-time queries happen outside the capture
    stream.synchronize();
    std::vector<Tensor> eager;
    for (const Tensor& out : a.outputs) eager.push_back(out.to_host());
    reset_outputs(staged_first);
    stream.synchronize();

    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(native, cudaStreamCaptureModeGlobal), cudaSuccess);
    std::string thrown;
    try {
      row.into(a, stream);
    } catch (const std::exception& e) {
      thrown = e.what();
    }
    const cudaError_t ended = cudaStreamEndCapture(native, &graph);
    ASSERT_TRUE(thrown.empty()) << "the _into form threw during capture: " << thrown;
    ASSERT_EQ(ended, cudaSuccess) << "capture invalidated (a host synchronisation inside the op?): "
                                  << cudaGetErrorString(ended);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

    expect_cuda(cudaGraphLaunch(exec, native), "cudaGraphLaunch");
    stream.synchronize();
    EXPECT_TRUE(outputs_match(a.outputs, eager, row, c.dtype)) << "replay against the eager call";

    // The graph reads its inputs at replay time.
    rewrite_inputs(row, a, staged_second, stream);
    reset_outputs(staged_second);
    expect_cuda(cudaGraphLaunch(exec, native), "cudaGraphLaunch");
    stream.synchronize();
    EXPECT_TRUE(outputs_match(a.outputs, reference(row, second), row, c.dtype))
        << "replay on rewritten inputs";

    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
#endif
}

// ---- More than 2^31 elements -----------------------------------------------------------------

namespace {

// `block` (host; rows along dim 0) repeated to `rows` rows on `device`, built there by doubling.
Tensor tile_rows(const Tensor& block, int64_t rows, Device device) {
  Shape shape = block.shape();
  const int64_t period = shape[0];
  shape[0] = rows;
  const Tensor big = Tensor::empty(shape, block.dtype(), device);
  big.slice(0, 0, period).copy_from(block);
  for (int64_t done = period; done < rows; done *= 2) {
    const int64_t n = std::min(done, rows - done);
    big.slice(0, done, done + n).copy_from(big.slice(0, 0, n));
  }
  return big;
}

// The first `rows` rows of every row-shaped tensor of `host` (leading dimension `period`).
Args first_rows(const Args& host, int64_t period, int64_t rows) {
  auto cut = [&](const Tensor& t) {
    return t.defined() && t.dim() > 0 && t.shape()[0] == period ? t.slice(0, 0, rows).contiguous()
                                                                : t;
  };
  Args a;
  for (const Tensor& t : host.inputs) a.inputs.push_back(cut(t));
  for (const Tensor& t : host.outputs) a.outputs.push_back(cut(t));
  return a;
}

}  // namespace

void check_tensors_beyond_two_to_the_31_elements(const ContractCase& c) {
  RUDNN_REQUIRE_CUDA();
  const OpRow& row = *c.row;
  if (!row.takes_big) GTEST_SKIP() << row.name << " does not take more than 2^31 elements";
  // 64-bit offsets do not depend on the element type; one dtype keeps the memory and time down.
  if (c.dtype != DType::bf16) GTEST_SKIP() << "run for bf16 only";
#if RUDNN_TEST_CUDA
  RUDNN_SEEDED_RNG(rng);
  SCOPED_TRACE(describe(c));
  constexpr int64_t kPeriod =
      64;  // the input repeats every kPeriod rows: the reference needs only those
  const int64_t cols = row.big_cols, rows = (int64_t{1} << 31) / cols + 1;
  const Args host = row.make(rng, c.dtype, kPeriod, cols);
  auto row_shaped = [&](const Tensor& t) {
    return t.defined() && t.dim() > 0 && t.shape()[0] == kPeriod;
  };

  size_t need = size_t{1} << 30;  // scratch and headroom
  for (const auto* list : {&host.inputs, &host.outputs}) {
    for (const Tensor& t : *list)
      need += row_shaped(t) ? nbytes(t) / kPeriod * rows : t.defined() ? nbytes(t) : 0;
  }
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  if (need > free_bytes) {
    GTEST_SKIP() << "needs " << (need >> 20) << " MiB of device memory, " << (free_bytes >> 20)
                 << " MiB free";
  }

  PoisonScope no_poison(
      false);  // a NaN fill of every byte would double the time; nothing here reads before writing
  const Device device = c.device;
  Args a;
  try {
    for (const Tensor& t : host.inputs) {
      a.inputs.push_back(row_shaped(t) ? tile_rows(t, rows, device)
                         : t.defined() ? t.to(device)
                                       : Tensor());
    }
    for (const Tensor& t : host.outputs) {
      Shape shape = t.shape();
      if (row_shaped(t)) shape[0] = rows;
      a.outputs.push_back(row.in_place ? tile_rows(t, rows, device)
                                       : Tensor::empty(shape, t.dtype(), device));
    }
    current_stream(device).synchronize();
    row.into(a, Stream());
    current_stream(device).synchronize();
  } catch (const Error& e) {
    if (e.code() == ErrorCode::OutOfMemory)
      GTEST_SKIP() << "device memory ran out (other tests running?): " << e.what();
    throw;
  }
  int64_t largest = 0;
  for (const Tensor& t : a.inputs) largest = std::max(largest, t.defined() ? t.numel() : 0);
  for (const Tensor& t : a.outputs) largest = std::max(largest, t.numel());
  ASSERT_GT(largest, int64_t{1} << 31);

  const std::vector<Tensor> expected = reference(row, host);
  // Outputs that sum over rows: whole periods of the block, then its first rows % kPeriod rows.
  const std::vector<Tensor> expected_rest =
      reference(row, first_rows(host, kPeriod, rows % kPeriod));
  const int64_t crossing = (int64_t{1} << 31) / cols;  // the first row at or past element 2^31
  for (size_t j = 0; j < a.outputs.size(); ++j) {
    SCOPED_TRACE(row.outputs[j].name);
    if (row_shaped(host.outputs[j])) {
      for (int64_t r : {int64_t{0}, int64_t{1}, rows / 2, crossing - 1, crossing, rows - 1}) {
        EXPECT_TRUE(all_close(a.outputs[j].slice(0, r, r + 1),
                              expected[j].slice(0, r % kPeriod, r % kPeriod + 1)))
            << "row " << r;
      }
    } else {
      const auto full = to_doubles(expected[j]), rest = to_doubles(expected_rest[j]);
      std::vector<double> sum(full.size());
      for (size_t k = 0; k < sum.size(); ++k)
        sum[k] = full[k] * static_cast<double>(rows / kPeriod) + rest[k];
      EXPECT_TRUE(
          all_close(a.outputs[j], host_tensor(sum, expected[j].shape(), expected[j].dtype())));
    }
  }
#endif
}

}  // namespace rudnn::test::contract
