// Synthetic assistant drafter checkpoints (`g4 synth --preset e2b-assistant|e4b-assistant|
// 12b-assistant`): config.json in the Hugging Face assistant form and model.safetensors with the
// real tensor names (model/arch/gemma4_assistant.h), shaped to drive the matching target preset
// (model/synth.h) of the same scale and vocabulary: backbone_hidden_size = the target's hidden
// size, the target's KV heads, head dims and sliding window. Values are seeded like the target's
// (linear ~ N(0, 1/in), norms 1 +- 10%, logits std ~6); token_ordering is a seeded permutation.
#pragma once

#include <string>

#include "base/status.h"
#include "model/synth.h"

namespace g4 {

struct SynthAssistantSpec {
  std::string preset;  // "e2b-assistant", ...
  SynthSpec target;    // the target preset it drafts for
  int hidden = 0;      // Ha
  int intermediate = 0;
  int heads = 0;
  bool centroid_head = false;  // E2B/E4B: use_ordered_embeddings
  int num_centroids = 0;       // set for the effective vocabulary (vocab / 128 when it divides)
  int top_k = 0;
};

// True for "<target>-assistant" preset names.
bool IsAssistantPreset(const std::string& preset);
Result<SynthAssistantSpec> SynthAssistantPreset(const std::string& preset, const std::string& scale);

std::string SynthAssistantConfigJson(const SynthAssistantSpec& spec, const SynthOptions& options);

// config.json + model.safetensors (single file; options.shards must be 1; no tokenizer: the
// assistant uses the target's).
Status WriteSynthAssistant(const SynthAssistantSpec& spec, const SynthOptions& options,
                           const std::string& out_dir);

}  // namespace g4
