// Include in a GPU test file to poison the whole test binary: every tensor allocated while its
// tests run starts as NaN bytes, so an element an op does not write fails the comparison. The
// inline variable registers the environment once per binary, however many files include it.
#pragma once

#include <gtest/gtest.h>

#include "support/test_support.h"

namespace rudnn::test {

class PoisonEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { set_poison_allocations(true); }
  void TearDown() override { set_poison_allocations(false); }
};

inline ::testing::Environment* const kPoisonEnvironment =
    ::testing::AddGlobalTestEnvironment(new PoisonEnvironment);

}  // namespace rudnn::test
