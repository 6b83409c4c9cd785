// Fuzzes config.json + generation_config.json parsing and the layer plan derived from them
// (ParseGemma4Config, BuildGemma4Plan). Input: config text, then optionally "\n---\n" and the
// generation config. A plan that is accepted must be self-consistent: later code trusts it.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_util.h"
#include "model/arch/gemma4.h"
#include "model/architecture.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto [config, generation] =
      g4::fuzz::SplitInput(std::string_view(reinterpret_cast<const char*>(data), size), "\n---\n");
  auto cfg = g4::ParseGemma4Config(std::string(config), std::string(generation), "fuzz");
  if (!cfg.ok()) return 0;
  auto plan = g4::PlanFromConfig(*cfg);
  if (!plan.ok()) return 0;
  const g4::ModelPlan& p = *plan;
  if (static_cast<int>(p.layers.size()) != cfg->num_hidden_layers) std::abort();
  for (const g4::LayerPlan& lp : p.layers) {
    if (lp.head_dim <= 0 || lp.n_heads_kv <= 0 || lp.group_size <= 0 || lp.mlp_width <= 0)
      std::abort();
    if (lp.kv_source < 0 || lp.kv_source > lp.index) std::abort();
    if (lp.rope_pairs < 0 || lp.rope_pairs > lp.head_dim / 2) std::abort();
    if (lp.q_dim() <= 0 || lp.kv_dim() <= 0) std::abort();
    if (lp.owns_kv() && p.kv_bytes_per_token(lp.index, 2) <= 0) std::abort();
  }
  // Derived sizes every consumer computes must not overflow (UBSan reports it if they do).
  volatile int q = p.max_q_dim(), kv = p.max_kv_dim(), hd = p.max_head_dim(), mlp = p.max_mlp_width();
  (void)q, (void)kv, (void)hd, (void)mlp;
  if (g4::FormatPlan(p).empty()) std::abort();
  return 0;
}
