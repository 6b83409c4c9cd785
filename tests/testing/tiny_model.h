// The tiny synthetic e2b model with the 512-id vocabulary (TinyTrie's ids), shared by the suites
// that drive generation and the scheduler on it (scheduler, constrained decoding, constrained
// speculation): loaded once per test process, one thread, kept until exit.
#pragma once

#include <gtest/gtest.h>

#include "model/forward.h"

namespace g4 {

// The model, or null after recording a test failure when it cannot be written or loaded.
Model* TinyTestModel();

// A fixture whose tests run on TinyTestModel(): `model_`.
class TinyModelTest : public ::testing::Test {
 protected:
  Model* model_ = TinyTestModel();
};

}  // namespace g4
