// The contract every op keeps, checked over a table of ops.
//
// Each family lists its ops as rows (an OpRow: how to make valid arguments, the functional
// and `_into` forms, the names of its operands) and instantiates the suite once:
//
//   const std::vector<OpRow>& my_family_rows();   // one row per op
//   RUDNN_OP_CONTRACT_SUITE(MyFamilyContract, my_family_rows)
//
// Every row then runs every check below, on the CPU and on the GPU, for each float dtype,
// each combination reported as its own test (`Ops/MyFamilyContract.ZeroRows/rms_norm_cuda_bf16`):
//
//   ErrorNamesTheOp              an undefined operand, a dtype or shape the op refuses, an
//                                operand on another device: a rudnn::Error whose message
//                                starts with "<op>: ", from both forms
//   OutputsUntouchedAfterError   the same bad calls of the _into form leave every output's
//                                bits as they were
//   OverlappingOutputsRejected   an output sharing memory with an input, or with another
//                                output, is refused ("<op>: ... overlaps ...")
//   ZeroRows                     a leading dimension of 0 works in both forms: empty row
//                                outputs, and outputs that sum over rows (parameter
//                                gradients) are zeros
//   InputsUnchanged              both forms leave every input's bits as they were
//   RunsOnTheGivenStream         on a non-default stream, behind work queued there (a host
//                                delay, then the inputs rewritten), results match the CPU
//                                reference after synchronising only that stream
//   (GPU only, suite <Name>Gpu)
//   CapturesIntoACudaGraph       the _into form captured in cudaStreamCaptureModeGlobal (a
//                                hidden host synchronisation invalidates the capture), replayed
//                                twice: it matches the eager result, then the reference for
//                                inputs rewritten between replays; skipped, with the row's
//                                reason, for a row whose op documents that call as not for
//                                capture (OpRow::not_capturable_because)
//   TensorsBeyondTwoToThe31Elements  rows whose elements number more than 2^31 (a periodic input
//                                built on the device), where the row says the op takes them;
//                                skipped with the reason when the device lacks the memory
//
// Assumptions a row must meet (normalization's ops do): the op works along rows, so every
// operand and output whose leading dimension is the row count is "row-shaped", and any other
// output (dgamma, dbeta) is a sum over rows; an op reads nothing from its outputs unless the
// row is in place. The "rows" are the leading axis, whatever the op calls it: the
// transformer family's rope rows are batch entries of x [B, H, T, D] (each of about `cols`
// elements), and an output that depends on one batch entry only is row-shaped too. The
// > 2^31 check takes any operand whose leading dimension is 64 (its period) for row-shaped
// and tiles it: a row's other operands (freqs [dims / 2], say) must not be 64 long there.
#pragma once

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace rudnn::test::contract {

// One tensor argument, as the op's error messages name it.
struct Operand {
  std::string name;                   // "x", "gamma", "targets", "dgamma_out"
  DType rejected_dtype = DType::i32;  // a dtype the op refuses here
  std::optional<Shape> rejected_shape =
      Shape{};            // a shape it refuses (default 0-d); none: any shape is valid
  bool optional = false;  // an undefined tensor is valid ("none": gamma, beta)
};

// The tensors of one call. Outputs are what the _into form writes, with the result's shape
// and dtype; their contents are ignored, except for in-place ops, whose outputs are also
// their inputs (scale_unless_one's x).
struct Args {
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
};

struct OpRow {
  std::string name;   // the op, as its error messages start: "cross_entropy_with_grad"
  std::string label;  // unique test-name part (defaults to name): "cross_entropy_with_grad_dloss"
  std::vector<Operand> inputs, outputs;
  // Valid host arguments for `rows` rows of length `cols` in the float dtype `dtype`.
  std::function<Args(Rng& rng, DType dtype, int64_t rows, int64_t cols)> make;
  // The functional form: its results in the order of `outputs`. Empty for in-place ops.
  std::function<std::vector<Tensor>(const Args&, const Stream&)> functional;
  // The _into form, writing args.outputs.
  std::function<void(const Args&, const Stream&)> into;
  bool in_place = false;    // outputs hold the input values the op updates
  bool takes_big = true;    // takes inputs of more than 2^31 elements
  bool cpu_only = false;    // no CUDA kernel yet (Unsupported on a GPU): CPU cases only
  int64_t big_cols = 8192;  // row length of that case (rows: enough to pass 2^31 elements)
  // Non-empty: the op documents this row's _into call as not for CUDA-graph capture (it
  // allocates a temporary on the stream, as norm_rope writing a cache of several heads
  // through its norm does); CapturesIntoACudaGraph is then skipped with this reason.
  std::string not_capturable_because;
  // The GPU path rounds intermediates to a 16-bit input dtype (the chunked gated delta
  // backward): the F32 outputs of a 16-bit case are held to that dtype's tolerance.
  bool f32_outputs_at_input_precision = false;

  const std::string& test_label() const { return label.empty() ? name : label; }
};

// One test: a row, a device, a dtype.
struct ContractCase {
  const OpRow* row = nullptr;
  Device device;
  DType dtype = DType::f32;
};

// Every row on the CPU and on CUDA device 0 (skipped there without a GPU), for each dtype;
// gpu_only: the CUDA cases only.
std::vector<ContractCase> contract_cases(const std::vector<OpRow>& rows, bool gpu_only,
                                         std::vector<DType> dtypes = {DType::f32, DType::f16,
                                                                      DType::bf16});
std::string contract_case_name(const ::testing::TestParamInfo<ContractCase>& info);
// "rms_norm on cuda:0, bf16" in GoogleTest's messages.
void PrintTo(const ContractCase& c, std::ostream* os);

// The checks (see the top of this file). Each skips itself on a CUDA case without a GPU.
void check_error_names_the_op(const ContractCase& c);
void check_outputs_untouched_after_error(const ContractCase& c);
void check_overlapping_outputs_rejected(const ContractCase& c);
void check_zero_rows(const ContractCase& c);
void check_inputs_unchanged(const ContractCase& c);
void check_runs_on_the_given_stream(const ContractCase& c);
void check_cuda_graph_capture(const ContractCase& c);
void check_tensors_beyond_two_to_the_31_elements(const ContractCase& c);

}  // namespace rudnn::test::contract

// Instantiates the contract checks over `rows_function()` (a function returning a
// `const std::vector<OpRow>&` that lives for the program): suite `Suite` for the checks that
// run on every device, `Suite##Gpu` for the CUDA-only ones.
#define RUDNN_OP_CONTRACT_SUITE(Suite, rows_function)                                             \
  class Suite : public ::testing::TestWithParam<::rudnn::test::contract::ContractCase> {};        \
  TEST_P(Suite, ErrorNamesTheOp) {                                                                \
    ::rudnn::test::contract::check_error_names_the_op(GetParam());                                \
  }                                                                                               \
  TEST_P(Suite, OutputsUntouchedAfterError) {                                                     \
    ::rudnn::test::contract::check_outputs_untouched_after_error(GetParam());                     \
  }                                                                                               \
  TEST_P(Suite, OverlappingOutputsRejected) {                                                     \
    ::rudnn::test::contract::check_overlapping_outputs_rejected(GetParam());                      \
  }                                                                                               \
  TEST_P(Suite, ZeroRows) { ::rudnn::test::contract::check_zero_rows(GetParam()); }               \
  TEST_P(Suite, InputsUnchanged) { ::rudnn::test::contract::check_inputs_unchanged(GetParam()); } \
  TEST_P(Suite, RunsOnTheGivenStream) {                                                           \
    ::rudnn::test::contract::check_runs_on_the_given_stream(GetParam());                          \
  }                                                                                               \
  INSTANTIATE_TEST_SUITE_P(                                                                       \
      Ops, Suite,                                                                                 \
      ::testing::ValuesIn(::rudnn::test::contract::contract_cases(rows_function(), false)),       \
      ::rudnn::test::contract::contract_case_name);                                               \
  class Suite##Gpu : public ::testing::TestWithParam<::rudnn::test::contract::ContractCase> {};   \
  TEST_P(Suite##Gpu, CapturesIntoACudaGraph) {                                                    \
    ::rudnn::test::contract::check_cuda_graph_capture(GetParam());                                \
  }                                                                                               \
  TEST_P(Suite##Gpu, TensorsBeyondTwoToThe31Elements) {                                           \
    ::rudnn::test::contract::check_tensors_beyond_two_to_the_31_elements(GetParam());             \
  }                                                                                               \
  INSTANTIATE_TEST_SUITE_P(                                                                       \
      Ops, Suite##Gpu,                                                                            \
      ::testing::ValuesIn(::rudnn::test::contract::contract_cases(rows_function(), true)),        \
      ::rudnn::test::contract::contract_case_name)
