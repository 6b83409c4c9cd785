// Synthetic Gemma-4 checkpoints in the real Hugging Face layout (`g4 synth`), for tests and
// benchmarks: config.json + generation_config.json with the real field set, safetensors with the
// real tensor names (text under `model.language_model.`, a few vision/audio tensors the text
// decoder must skip, the unused K/V of shared layers, `layer_scalar` as a [1] tensor) and a copy
// of tokenizer.json. Weights are seeded random, chosen so the network is numerically stable and
// decisive (docs/gemma4.md §9 and the conditioning notes in docs/correctness.md): linear ~ N(0, 1/in), norms 1 +- 10%, q/k norms
// near head_dim^-0.25 (attention scale is 1.0), layer_scalar in [0.4, 0.9], logits std ~6.
//
// Every tensor is generated from (seed, tensor name, element index) alone, so its bytes do not
// depend on sharding, the config form or the order of writing; full-size presets are streamed
// tensor by tensor and never held in memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/safetensors.h"

namespace g4 {

enum class SynthConfigForm {
  kFlat,      // global_head_dim / num_global_key_value_heads (configs as published)
  kPerLayer,  // per_layer_config with string layer keys (transformers >= 5.15)
};

struct SynthOptions {
  uint64_t seed = 1;
  int vocab = 0;  // 0: the preset's vocabulary (262,144); smaller values make fast unit tests
  SynthConfigForm config_form = SynthConfigForm::kFlat;
  int shards = 1;  // > 1: model-0000k-of-0000N.safetensors + model.safetensors.index.json
  DType dtype = DType::kBF16;  // kBF16, kF16 or kF32
  std::string tokenizer;       // tokenizer.json to copy into the checkpoint (required)
};

// The structure of one synthetic text decoder; the values written to config.json.
struct SynthSpec {
  std::string preset;    // "e2b", "e4b", "12b"
  std::string scale;     // "tiny", "full"
  bool unified = false;  // 12B: model_type gemma4_unified / gemma4_unified_text
  int vocab = 262144;
  int hidden = 0;
  int intermediate = 0;
  int layers = 0;
  int heads = 0;
  int kv_heads = 0;         // sliding layers (and full layers unless k_eq_v)
  int head_dim = 0;         // sliding layers
  int global_head_dim = 0;  // full layers
  int global_kv_heads = 0;  // full layers when k_eq_v; 0 writes null
  bool k_eq_v = false;
  bool double_wide = false;
  int window = 0;
  int kv_shared = 0;  // num_kv_shared_layers
  int ple_dim = 0;    // hidden_size_per_layer_input; 0 = no PLE
  int max_position = 0;
  std::vector<std::string> layer_types;
};

// Presets: e2b|e4b|12b x tiny|full. `full` has the real dimensions of spec §1.1.
Result<SynthSpec> SynthPreset(const std::string& preset, const std::string& scale);

// The JSON files, as written by WriteSynthCheckpoint (options: vocab override, form, dtype).
std::string SynthConfigJson(const SynthSpec& spec, const SynthOptions& options);
std::string SynthGenerationConfigJson(const SynthSpec& spec, const SynthOptions& options);

// One tensor and how it is filled: uniform in [lo, hi] or normal with mean lo and std hi.
struct SynthTensor {
  std::string name;  // full checkpoint name, e.g. "model.language_model.layers.0.layer_scalar"
  std::vector<int64_t> shape;
  bool normal = true;
  double lo = 0, hi = 1;
  int64_t numel() const;
};

// Every tensor of the checkpoint, text and towers, sorted by name.
std::vector<SynthTensor> SynthTensors(const SynthSpec& spec, const SynthOptions& options);

// Value of element `index` of `tensor` (before rounding to the checkpoint dtype).
float SynthValue(const SynthTensor& tensor, uint64_t seed, uint64_t index);

// Writes the checkpoint into `out_dir` (created if missing; existing files are replaced).
Status WriteSynthCheckpoint(const SynthSpec& spec, const SynthOptions& options,
                            const std::string& out_dir);

}  // namespace g4
