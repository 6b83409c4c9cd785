// g4 inspect: the layer plan, parameter counts and the memory a run needs.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "base/mapped_file.h"
#include "cli/cli_util.h"
#include "cli/command.h"
#include "model/architecture.h"
#include "model/kv_cache.h"
#include "model/plan.h"
#include "model/rank_plan.h"
#include "model/weights.h"
#include "tokenizer/chat_template.h"

namespace g4::cli {
namespace {

std::string Commas(int64_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(i, ",");
  return s;
}

std::string GiB(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  return buf;
}

// MiB below a GiB (a small model's cache), else GiB.
std::string Size(double bytes) {
  if (bytes >= 1024.0 * 1024 * 1024) return GiB(bytes);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1024.0 * 1024));
  return buf;
}

// The capacity plan per rank: what `g4 run --tp N` loads, from the real parameter shapes.
void PrintRanks(const ModelPlan& full, int tp, int ctx) {
  const int chunk = 64;
  int sharded = 0, replicated = 0;
  auto r0 = BuildRankPlan(full, 0, tp);
  for (int layer : full.kv_owners)
    (KvReplicated(full.layers[layer], r0->layers[layer]) ? replicated : sharded)++;
  std::printf("\ntensor parallel --tp %d: query heads and MLP split; K/V split on %d owner layers, "
              "replicated on %d (KV heads not divisible by %d); LM head split by vocabulary\n",
              tp, sharded, replicated, tp);
  std::printf("rank  q_heads/layer  weights (bf16)  norms     mapped (PLE+lookup)  KV B/token  KV @ctx %-6d  resident total\n", ctx);
  double sum = 0;
  for (int r = 0; r < tp; ++r) {
    auto p = BuildRankPlan(full, r, tp);
    const RankMemory m = EstimateRankMemory(*p);
    const double kv = static_cast<double>(KvCache::BytesFor(*p, ctx, chunk));
    const double total = m.matrix_bytes + m.vector_bytes + kv;
    sum += total;
    std::printf("%4d  %13d  %14s  %8s  %19s  %10s  %14s  %s\n", r, p->layers[0].n_heads_q,
                GiB(m.matrix_bytes).c_str(), GiB(m.vector_bytes).c_str(), GiB(m.mapped_bytes).c_str(),
                Commas(m.kv_bytes_per_token).c_str(), GiB(kv).c_str(), GiB(total).c_str());
  }
  const RankMemory one = EstimateRankMemory(full);
  const double one_total = one.matrix_bytes + one.vector_bytes + KvCache::BytesFor(full, ctx, chunk);
  std::printf("all ranks: %s resident (tp 1: %s); the mapped tables are shared through the page cache\n",
              GiB(sum).c_str(), GiB(one_total).c_str());
}

int RunInspect(int argc, char** argv) {
  CLI::App app{"Print the layer plan, parameter counts, KV bytes per token and memory needs", "g4 inspect"};
  std::string model_dir = DefaultModelPath();
  int ctx = 4096, tp = 1;
  app.add_option("--model", model_dir, "model directory (Hugging Face layout)");
  app.add_option("--ctx", ctx, "context length to size the KV cache for");
  app.add_option("--tp", tp, "also show what each of N tensor-parallel ranks holds");
  std::string kv_type = "f32";
  app.add_option("--kv-type", kv_type, kKvTypeHelp)->check(CLI::IsMember({"f32", "bf16", "q8"}));
  CLI11_PARSE(app, argc, argv);

  auto plan = LoadModelPlan(model_dir);
  if (!plan.ok()) return Fail("inspect", plan.status());
  // Unsupported rank counts fail up front, before any output.
  if (Status st = CheckTensorParallel(*plan, tp); !st.ok()) return Fail("inspect", st);
  const ModelConfig& c = plan->config;
  std::printf("model: %s (model_type %s, text %s)\n", model_dir.c_str(), c.model_type.c_str(),
              c.text_model_type.c_str());
  std::printf("hidden %d, layers %d, vocab %d, heads %d, PLE width %d, sliding window %d, "
              "KV-shared layers %d (from layer %d), softcap %g\n",
              plan->hidden, plan->n_layers(), plan->vocab, c.num_attention_heads, plan->ple_dim,
              c.sliding_window, c.num_kv_shared_layers, plan->first_kv_shared, plan->softcap);
  std::printf("eos ids:");
  for (int id : c.eos_token_ids) std::printf(" %d", id);
  if (!c.suppress_tokens.empty()) {
    std::printf("; suppressed:");
    for (int id : c.suppress_tokens) std::printf(" %d", id);
  }
  std::printf("\n");
  if (auto tmpl = ChatTemplate::Load(model_dir); tmpl.ok()) {
    std::printf("chat template: %s\n", tmpl->Describe().c_str());
  } else {
    std::printf("chat template: error: %s\n", tmpl.status().message().c_str());
  }
  std::printf("\n%s\n", FormatPlan(*plan).c_str());

  ParameterCounts p = CountParameters(*plan);
  std::printf("parameters (text decoder, as stored):\n");
  std::printf("  total              %s\n", Commas(p.total).c_str());
  std::printf("  embedding (=head)  %s\n", Commas(p.embedding).c_str());
  std::printf("  PLE table          %s\n", Commas(p.ple_table).c_str());
  std::printf("  effective          %s  (total minus the PLE table)\n", Commas(p.effective).c_str());
  std::printf("  read per token     %s  (%s in bf16)\n", Commas(p.per_token_read).c_str(),
              GiB(p.per_token_read * 2.0).c_str());

  // K and V per token of context, per cache format (--kv-type; kernels/kv_format.h). Sliding
  // layers keep a ring of window + chunk positions, so only full layers grow with the context.
  std::printf("\nKV cache (%zu owner layers of %d; sliding layers keep a ring of window + chunk):\n",
              plan->kv_owners.size(), plan->n_layers());
  std::printf("  %-8s %16s %19s %14s\n", "kv-type", "full B/token", "sliding B/token",
              Str("KV @ctx ", ctx).c_str());
  for (KvType type : {KvType::kF32, KvType::kBF16, KvType::kQ8}) {
    int64_t kv_full = 0, kv_sliding = 0;
    for (int layer : plan->kv_owners) {
      const LayerPlan& lp = plan->layers[layer];
      (lp.is_sliding() ? kv_sliding : kv_full) +=
          2 * static_cast<int64_t>(KvBytes(type, lp.head_dim, lp.kv_dim()));
    }
    std::printf("  %-8s %16s %19s %14s%s\n", KvTypeName(type), Commas(kv_full).c_str(),
                Commas(kv_sliding).c_str(), Size(KvCache::BytesFor(*plan, ctx, 64, type)).c_str(),
                type == KvTypeOf(kv_type) ? "  <- --kv-type" : "");
  }
  std::printf("memory for --ctx %d: weights resident %s (bf16) + PLE table mapped %s + KV %s (%s)\n",
              ctx, GiB((p.effective) * 2.0).c_str(), GiB(p.ple_table * 2.0).c_str(),
              Size(KvCache::BytesFor(*plan, ctx, 64, KvTypeOf(kv_type))).c_str(), kv_type.c_str());
  if (tp > 1) PrintRanks(*plan, tp, ctx);
  return 0;
}

}  // namespace

G4_COMMAND("inspect", "print the layer plan, parameter counts and memory needs", RunInspect);

}  // namespace g4::cli
