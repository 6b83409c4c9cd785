#include "model/plan.h"

#include <gtest/gtest.h>

#include "model/arch/gemma4.h"

namespace g4 {
namespace {

TEST(Placeholder, Builds) { EXPECT_TRUE(true); }

}  // namespace
}  // namespace g4
