// Fuzzes the assistant drafter's config.json parsing (ParseAssistantConfig), its tensor table and
// its binding to a fixed target (BuildAssistantPlan against the tiny E2B preset's plan). What is
// accepted must be self-consistent: binding and the draft step trust it.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "model/arch/gemma4_assistant.h"
#include "model/architecture.h"
#include "model/synth.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const g4::ModelPlan target = [] {
    auto spec = g4::SynthPreset("e2b", "tiny");
    auto cfg = g4::ParseModelConfig(g4::SynthConfigJson(*spec, {.vocab = 512}), "", "target");
    return *g4::PlanFromConfig(*cfg);
  }();
  auto cfg = g4::ParseAssistantConfig(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!cfg.ok()) return 0;
  for (const g4::AssistantTensor& t : g4::AssistantTensors(*cfg))
    for (int64_t d : t.shape)
      if (d <= 0) std::abort();
  auto plan = g4::BuildAssistantPlan(*cfg, target);
  if (!plan.ok()) return 0;
  if (plan->hidden <= 0 || plan->mlp_width <= 0 || plan->backbone_hidden != target.hidden)
    std::abort();
  if (plan->centroid_head() &&
      (plan->cluster_size() <= 0 || plan->config.centroid_top_k > plan->config.num_centroids))
    std::abort();
  for (const g4::LayerPlan& lp : plan->layers) {
    if (lp.kv_source < 0 || lp.kv_source >= target.n_layers() || lp.kv_slot < 0) std::abort();
    const g4::LayerPlan& s = target.layers[lp.kv_source];
    if (!s.owns_kv() || s.head_dim != lp.head_dim || s.n_heads_kv != lp.n_heads_kv) std::abort();
  }
  return 0;
}
