// The Autotune record (rudnn/autotune.h, common/autotune.h) on the host: the measurement
// driven by a fake timer (each candidate run once untimed, once timed, pruned or timed
// kTimedRuns more times; the fastest recorded; a recorded class never measured again;
// capture; out-of-memory candidates; errors), the cache file (written, read back, later
// lines winning, memory before file, malformed files refused whole) and the CPU calls of the
// Autotune strategies, which run the reference like every strategy. The GPU calls are in
// the attention and conv GPU tests.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/autotune.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

using common::TuneCandidate;

// Fake candidates: each run counts and notes itself; the timer answers with the noted
// candidate's set time.
struct Bench {
  std::map<std::string, double> ms;
  std::map<std::string, int> runs;
  std::string last;
  std::vector<int> repeats_asked;
  bool capturing = false;

  std::vector<TuneCandidate> candidates() {
    std::vector<TuneCandidate> out;
    for (const auto& [label, time] : ms) {
      (void)time;
      out.push_back({label, [this, label = label] {
                       ++runs[label];
                       last = label;
                     }});
    }
    return out;
  }
  std::string choose(const std::string& key, const std::string& untuned = "Auto") {
    return common::autotuned_choice(
        key, candidates(), untuned, [this] { return capturing; },
        [this](const std::function<void()>& run, int repeats) {
          repeats_asked.push_back(repeats);
          for (int r = 0; r < repeats; ++r) run();
          return ms.at(last);
        });
  }
  int total_runs() const {
    int n = 0;
    for (const auto& [label, count] : runs) n += count;
    return n;
  }
};

const AutotuneEntry* entry_of(const std::vector<AutotuneEntry>& entries, const std::string& key) {
  for (const AutotuneEntry& e : entries) {
    if (e.key == key) return &e;
  }
  return nullptr;
}

// A fresh path in the temporary directory, removed (with the record and the attached file)
// when the test ends.
class Scratch {
 public:
  Scratch() {
    autotune_set_file("");
    autotune_clear();
    static int counter = 0;
    path_ = (std::filesystem::temp_directory_path() /
             ("rudnn_autotune_" + std::to_string(::getpid()) + "_" + std::to_string(++counter)))
                .string();
    std::filesystem::remove_all(path_);
  }
  ~Scratch() {
    autotune_set_file("");
    autotune_clear();
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_all(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

TEST(Autotune, MeasuresOnceAndRecordsTheFastest) {
  Scratch scratch;
  Bench b;
  b.ms = {{"A", 3.0}, {"B", 1.0}, {"C", 2.0}};
  EXPECT_EQ(b.choose("op | dev | class 1"), "B");
  // Each: one untimed run, one timed run, kTimedRuns (3) more: none is 4x the best so far.
  EXPECT_EQ(b.runs["A"], 5);
  EXPECT_EQ(b.runs["B"], 5);
  EXPECT_EQ(b.runs["C"], 5);
  const auto entries = autotune_entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].key, "op | dev | class 1");
  EXPECT_EQ(entries[0].choice, "B");
  EXPECT_EQ(entries[0].measurements, 1);
  ASSERT_EQ(entries[0].timings.size(), 3u);
  for (const AutotuneTiming& t : entries[0].timings) EXPECT_EQ(t.milliseconds, b.ms[t.candidate]);

  // The class is recorded: nothing runs, nothing is measured again, even when the times
  // would now favour another candidate.
  b.ms = {{"A", 0.1}, {"B", 1.0}, {"C", 2.0}};
  const int before = b.total_runs();
  EXPECT_EQ(b.choose("op | dev | class 1"), "B");
  EXPECT_EQ(b.total_runs(), before);
  EXPECT_EQ(autotune_entries()[0].measurements, 1);
  // Another class is measured on its own.
  EXPECT_EQ(b.choose("op | dev | class 2"), "A");
  EXPECT_EQ(autotune_entries().size(), 2u);
}

TEST(Autotune, CandidatesFarSlowerThanTheBestStopAfterOneTimedRun) {
  Scratch scratch;
  Bench b;
  b.ms = {{"A", 1.0}, {"B", 4.5}, {"C", 3.9}};
  EXPECT_EQ(b.choose("k"), "A");
  EXPECT_EQ(b.runs["A"], 5);
  EXPECT_EQ(b.runs["B"], 2);  // one untimed, one timed: more than 4x A
  EXPECT_EQ(b.runs["C"], 5);  // within 4x of A: timed in full
  EXPECT_EQ(b.repeats_asked, (std::vector<int>{1, 3, 1, 1, 3}));
}

TEST(Autotune, ASingleCandidateIsNeitherMeasuredNorRecorded) {
  Scratch scratch;
  Bench b;
  b.ms = {{"Only", 1.0}};
  EXPECT_EQ(b.choose("k"), "Only");
  EXPECT_EQ(b.total_runs(), 0);
  EXPECT_TRUE(autotune_entries().empty());
}

TEST(Autotune, UnderCaptureTheRecordOrTheUntunedChoiceRuns) {
  Scratch scratch;
  Bench b;
  b.ms = {{"A", 2.0}, {"B", 1.0}};
  b.capturing = true;
  EXPECT_EQ(b.choose("k", "Auto"), "Auto");
  EXPECT_EQ(b.total_runs(), 0);
  EXPECT_TRUE(autotune_entries().empty());
  b.capturing = false;
  EXPECT_EQ(b.choose("k"), "B");
  b.capturing = true;
  const int before = b.total_runs();
  EXPECT_EQ(b.choose("k", "Auto"), "B");
  EXPECT_EQ(b.total_runs(), before);
}

TEST(Autotune, OutOfMemoryCandidatesAreLeftOutOtherErrorsPropagate) {
  Scratch scratch;
  Bench b;
  b.ms = {{"A", 2.0}, {"B", 1.0}};
  auto candidates = b.candidates();
  candidates[1].run = [] { throw Error(ErrorCode::OutOfMemory, "op: out of memory"); };
  const auto timer = [&](const std::function<void()>& run, int repeats) {
    for (int r = 0; r < repeats; ++r) run();
    return b.ms.at(b.last);
  };
  const auto never = [] { return false; };
  EXPECT_EQ(common::autotuned_choice("k", candidates, "Auto", never, timer), "A");
  const auto entries = autotune_entries();
  ASSERT_EQ(entries.size(), 1u);
  ASSERT_EQ(entries[0].timings.size(), 1u);
  EXPECT_EQ(entries[0].timings[0].candidate, "A");

  const auto choose = [&](const char* key) {
    common::autotuned_choice(key, candidates, "Auto", never, timer);
  };
  candidates[0].run = candidates[1].run;
  EXPECT_TRUE(throws_error([&] { choose("k2"); }, ErrorCode::OutOfMemory, {"out of memory"}));
  candidates[0].run = [] { throw Error(ErrorCode::Cuda, "op: launch failed"); };
  EXPECT_TRUE(throws_error([&] { choose("k3"); }, ErrorCode::Cuda, {"launch failed"}));
  EXPECT_EQ(autotune_entries().size(), 1u);
}

TEST(Autotune, TheFileIsWrittenAndReadBack) {
  Scratch scratch;
  ASSERT_FALSE(std::filesystem::exists(scratch.path()));
  autotune_set_file(scratch.path());
  EXPECT_EQ(autotune_file(), scratch.path());
  EXPECT_TRUE(std::filesystem::exists(scratch.path())) << "the file is created when missing";
  Bench b;
  b.ms = {{"A", 2.0}, {"B", 1.0}};
  EXPECT_EQ(b.choose("op | dev | x"), "B");
  EXPECT_EQ(read_all(scratch.path()), "op | dev | x\tB\tA=2 B=1\n");

  // A new process, in effect: the record is empty, the file gives the choice back.
  autotune_set_file("");
  autotune_clear();
  autotune_set_file(scratch.path());
  const auto entries = autotune_entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].choice, "B");
  EXPECT_EQ(entries[0].measurements, 0);
  EXPECT_TRUE(entries[0].timings.empty());
  const int before = b.total_runs();
  EXPECT_EQ(b.choose("op | dev | x"), "B");
  EXPECT_EQ(b.total_runs(), before);

  // autotune_clear keeps the file attached: a new class is appended.
  autotune_clear();
  EXPECT_EQ(autotune_file(), scratch.path());
  EXPECT_EQ(b.choose("op | dev | y"), "B");
  EXPECT_EQ(read_all(scratch.path()), "op | dev | x\tB\tA=2 B=1\nop | dev | y\tB\tA=2 B=1\n");
  // Detached: nothing more is written.
  autotune_set_file("");
  EXPECT_EQ(autotune_file(), "");
  EXPECT_EQ(b.choose("op | dev | z"), "B");
  EXPECT_EQ(read_all(scratch.path()), "op | dev | x\tB\tA=2 B=1\nop | dev | y\tB\tA=2 B=1\n");
}

TEST(Autotune, LaterLinesWinMemoryKeepsItsChoiceStaleChoicesAreMeasured) {
  Scratch scratch;
  write_all(scratch.path(), "k1\tA\n\nk1\tB\tA=1 B=2\r\nk2\tGone\nk3\tA\n");
  Bench b;
  b.ms = {{"A", 1.0}, {"B", 2.0}};
  EXPECT_EQ(b.choose("k3"), "A");  // measured and recorded before the file is attached
  autotune_set_file(scratch.path());
  const auto entries = autotune_entries();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entry_of(entries, "k1")->choice, "B");
  EXPECT_EQ(entry_of(entries, "k3")->measurements, 1) << "the record in memory is kept";
  EXPECT_EQ(b.choose("k1"), "B");
  EXPECT_EQ(b.total_runs(), 10) << "k1 is read from the file, not measured";
  // "Gone" is no candidate of this call: the class is measured and its line appended.
  EXPECT_EQ(b.choose("k2"), "A");
  EXPECT_EQ(entry_of(autotune_entries(), "k2")->choice, "A");
  const std::string text = read_all(scratch.path());
  EXPECT_EQ(text.substr(text.size() - 13), "k2\tA\tA=1 B=2\n");
}

TEST(Autotune, MalformedOrUnusableFilesAreRefusedWhole) {
  Scratch scratch;
  write_all(scratch.path(), "good\tA\nno tab here\n");
  EXPECT_TRUE(throws_error([&] { autotune_set_file(scratch.path()); }, ErrorCode::InvalidArgument,
                           {"autotune_set_file: ", scratch.path(), "line 2",
                            "is not \"<key>\\t<choice>[\\t...]\""}));
  EXPECT_TRUE(autotune_entries().empty()) << "nothing is read from a malformed file";
  EXPECT_EQ(autotune_file(), "");
  for (const char* text : {"\tA\n", "k\t\n", "k\t\tA=1\n"}) {
    write_all(scratch.path(), text);
    EXPECT_TRUE(throws_error([&] { autotune_set_file(scratch.path()); },
                             ErrorCode::InvalidArgument, {"line 1"}))
        << text;
  }
  std::filesystem::remove_all(scratch.path());
  std::filesystem::create_directory(scratch.path());
  EXPECT_TRUE(throws_error([&] { autotune_set_file(scratch.path()); }, ErrorCode::InvalidArgument,
                           {"autotune_set_file: ", scratch.path()}));
  const std::string missing_dir = scratch.path() + "/no/such/dir/file";
  EXPECT_TRUE(throws_error([&] { autotune_set_file(missing_dir); }, ErrorCode::InvalidArgument,
                           {"autotune_set_file: cannot open ", missing_dir, "for appending"}));
  EXPECT_EQ(autotune_file(), "");
}

TEST(Autotune, SizeClassesArePowersOfTwo) {
  EXPECT_EQ(common::size_class(0), 0);
  EXPECT_EQ(common::size_class(1), 1);
  EXPECT_EQ(common::size_class(2), 2);
  EXPECT_EQ(common::size_class(3), 4);
  EXPECT_EQ(common::size_class(4096), 4096);
  EXPECT_EQ(common::size_class(4097), 8192);
  EXPECT_EQ(common::size_class(int64_t{1} << 40), int64_t{1} << 40);
}

// On the CPU every strategy runs the float64 reference: Autotune measures nothing and gives
// Auto's bits; without the build option it is Unsupported.
TEST(Autotune, CpuCallsRunTheReference) {
  Scratch scratch;
  RUDNN_SEEDED_RNG(rng);
  const Tensor q = random_tensor(rng, {1, 2, 20, 16}, DType::f32);
  const Tensor k = random_tensor(rng, {1, 2, 24, 16}, DType::f32);
  const Tensor v = random_tensor(rng, {1, 2, 24, 16}, DType::f32);
  const AttentionOptions o = AttentionOptions{}.set_causal().set_return_lse();
  const Tensor x = random_tensor(rng, {2, 4, 9, 9}, DType::f32);
  const Tensor w = random_tensor(rng, {6, 4, 3, 3}, DType::f32);
  ConvOptions<2> co;
  co.padding = {1, 1};
  if (!autotune_built()) {
    EXPECT_TRUE(throws_error([&] { attention(q, k, v, o, AttentionStrategy::Autotune); },
                             ErrorCode::Unsupported,
                             {"attention: strategy Autotune", "RUDNN_AUTOTUNE=OFF"}));
    EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, w, Tensor(), co, ConvStrategy::Autotune); },
                             ErrorCode::Unsupported,
                             {"conv_forward: strategy Autotune", "RUDNN_AUTOTUNE=OFF"}));
    return;
  }
  const AttentionResult tuned = attention(q, k, v, o, AttentionStrategy::Autotune);
  const AttentionResult automatic = attention(q, k, v, o);
  EXPECT_TRUE(bit_equal(tuned.out, automatic.out));
  EXPECT_TRUE(bit_equal(tuned.lse, automatic.lse));
  const AttentionPlan plan = plan_attention(q.shape(), k.shape(), v.shape(), DType::f32, o,
                                            AttentionStrategy::Autotune, Device::cpu());
  EXPECT_EQ(plan.kernel, AttentionKernel::Reference);
  EXPECT_TRUE(bit_equal(conv_forward<2>(x, w, Tensor(), co, ConvStrategy::Autotune),
                        conv_forward<2>(x, w, Tensor(), co)));
  const Tensor dy = random_tensor(rng, {2, 6, 9, 9}, DType::f32);
  EXPECT_TRUE(bit_equal(conv_data_backward<2>(dy, w, x.shape(), co, ConvStrategy::Autotune),
                        conv_data_backward<2>(dy, w, x.shape(), co)));
  for (ConvDirection d : {ConvDirection::Forward, ConvDirection::DataBackward,
                          ConvDirection::WeightBackward}) {
    EXPECT_EQ(plan_conv<2>(d, x.shape(), w.shape(), DType::f32, Device::cpu(), co,
                           ConvStrategy::Autotune)
                  .kernel,
              ConvKernel::Reference);
  }
  EXPECT_TRUE(autotune_entries().empty());
  // The strategy's errors are the op's: a bad shape is reported before anything runs.
  EXPECT_TRUE(throws_error(
      [&] { attention(q, k.view({2, 24, 16}), v, o, AttentionStrategy::Autotune); },
      ErrorCode::ShapeMismatch, {"attention: k has shape [2, 24, 16]"}));
}

}  // namespace
}  // namespace rudnn::test
