// Test checkpoints for every test: tiny synthetic Gemma-4 models written by model/synth.
//
//   std::string dir = TinyCheckpoint("e2b");                       // real vocab 262,144
//   std::string fast = TinyCheckpoint("12b", {.vocab = 512});      // small LM head, fast tests
//   std::string two = TinyCheckpoint("e4b", {.shards = 2});
//
// Checkpoints are cached under $G4_BINARY_DIR/testdata/cache/<preset+options>-<fingerprint>,
// shared by all test processes (ctest runs each test in its own process; an E-preset with the
// real vocabulary is ~150 MB and ~1 s to write). The fingerprint covers the generator's output,
// so editing synth.cc never reuses a stale entry. The directories are SHARED AND READ-ONLY: to
// perturb or break a checkpoint, CopyCheckpoint it into a TestTempDir first.
// Scratch directories (TestTempDir) live under $G4_BINARY_DIR/testdata/<pid>/ and are removed
// when the process exits.
// The tokenizer is $G4_ASSETS/tokenizer/gemma4.json, else $G4_SOURCE_DIR/assets/...; a missing
// one fails the calling test. On any failure the helpers record a gtest failure and return "".
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/safetensors.h"
#include "model/synth.h"

namespace g4 {

// Directory of the tiny preset ("e2b", "e4b", "12b") written with `options` (its tokenizer field
// defaults to TestTokenizerPath()).
std::string TinyCheckpoint(const std::string& preset, const SynthOptions& options = {});

// The preset's tiny assistant drafter ("e2b" -> e2b-assistant, vocab 512 to pair with
// TinyCheckpoint(preset, {.vocab = 512})), written to TestTempDir(preset + "-assistant-" + tag).
std::string TinyAssistant(const std::string& preset, const std::string& tag = "tiny");

// The Gemma-4 test tokenizer.json.
std::string TestTokenizerPath();

// A fresh, empty directory for this test process: $G4_BINARY_DIR/testdata/<pid>/<name>.
std::string TestTempDir(const std::string& name);

// Copies checkpoint `src` to `dst` (config, generation config, tokenizer; the weights as one
// model.safetensors). `edit`, if given, sees each tensor's values as float and returns true if it
// changed them; changed values are rounded back to the tensor's dtype. For perturbation tests
// and deliberately broken checkpoints.
using TensorEdit = std::function<bool(const std::string& name, std::vector<float>& values)>;
Status CopyCheckpoint(const std::string& src, const std::string& dst,
                      const TensorEdit& edit = nullptr);

// Copies checkpoint `src` to `dst` with its weights rewritten as one model.safetensors, raw bytes
// as stored: `edit` sees each tensor and may change its name, shape or bytes, or return false to
// drop it. For checkpoints with missing or mis-shaped tensors.
Status RewriteCheckpoint(const std::string& src, const std::string& dst,
                         const std::function<bool(TensorToWrite&)>& edit);

}  // namespace g4
