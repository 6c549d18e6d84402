#include "transformer/cuda/tuning.h"

#include <iterator>

namespace rudnn::transformer::cuda {

KernelTuning& kernel_tuning() {
  static KernelTuning tuning;
  return tuning;
}

NormRopeChoices norm_rope_choices() {
  static const NormRopeChoice choices[] = {
      {"lane groups", [](KernelTuning& t) { t.norm_rope_pairs = false; }},
      {"pairs, registers", [](KernelTuning& t) { t.norm_rope_pair_ring = false; }},
      {"pairs, a block per row block",
       [](KernelTuning& t) { t.norm_rope_pair_persistent = false; }},
      {"pairs, registers, L2 prefetch",
       [](KernelTuning& t) {
         t.norm_rope_pair_ring = false;
         t.norm_rope_pair_prefetch = true;
       }},
      {"pairs, plain accesses", [](KernelTuning& t) { t.norm_rope_pair_streamed = false; }},
      {"pairs, registers, a block per row block",
       [](KernelTuning& t) {
         t.norm_rope_pair_ring = false;
         t.norm_rope_pair_persistent = false;
       }},
  };
  return {std::begin(choices), std::end(choices)};
}

}  // namespace rudnn::transformer::cuda
