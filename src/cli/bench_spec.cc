// g4 bench --spec: what speculative decoding costs and gains on this machine. The verify cost is
// the time of one target pass over N+1 rows of one sequence (the last token and N drafts, all
// with logits) relative to one decode row: it decides the speedup, tokens per pass / cost. Then
// the same prompt is decoded plainly and speculatively, alternately, --reps times.
#include <algorithm>
#include <cstdio>

#include "base/stopwatch.h"
#include "cli/bench.h"
#include "model/kv_cache.h"
#include "runtime/generate.h"
#include "runtime/speculative.h"

namespace g4::cli {

namespace {

constexpr int kVerifyPasses = 8;  // passes per measurement of one row count

// Seconds of one pass of `rows` rows after the cache's contents, rolled back after each pass.
Result<double> VerifyPassSeconds(Model& model, KvCache& cache, Activations& act,
                                 std::vector<float>& logits, const std::vector<int>& ids, int rows) {
  std::vector<BatchRow> batch;
  const int64_t past = cache.n_past();
  const Stopwatch timer;
  for (int p = 0; p < kVerifyPasses; ++p) {
    batch.clear();
    for (int r = 0; r < rows; ++r)
      batch.push_back(BatchRow{ids[static_cast<size_t>(past + r) % ids.size()], past + r, &cache, true});
    G4_RETURN_IF_ERROR(model.Forward(batch, act, logits.data()));
    if (!cache.RollbackTo(past)) return Status::Error("internal: verify rows could not roll back");
  }
  return timer.Seconds() / kVerifyPasses;
}

}  // namespace

Result<nlohmann::json> BenchSpeculative(const BenchFlags& f, Model& model, SpecSetup& setup,
                                        const std::vector<int>& ids) {
  const int V = model.plan().vocab;
  const int n_max = setup.options.draft_max;
  const int ctx = std::max(1, f.contexts.front());
  KvCache cache(model.plan(), ctx + f.decode_tokens + n_max + 2, std::max(f.chunk, n_max + 1));
  Activations act;
  std::vector<float> logits(static_cast<size_t>(n_max + 1) * V);
  const std::vector<int> prompt(ids.begin(), ids.begin() + ctx);
  G4_RETURN_IF_ERROR(Prefill(model, cache, prompt, cache.max_chunk(), false, act).status());

  // Verify cost: row counts 1 .. n_max+1 in turns, the order reversed every round (ABBA), so a
  // drifting machine favours none; the best of the rounds.
  std::vector<double> best(static_cast<size_t>(n_max + 1), 1e30);
  for (int round = 0; round < std::max(2, f.reps * 2); ++round) {
    for (int k = 0; k <= n_max; ++k) {
      const int rows = round % 2 ? n_max + 1 - k : k + 1;
      G4_ASSIGN_OR_RETURN(double s, VerifyPassSeconds(model, cache, act, logits, ids, rows));
      best[rows - 1] = std::min(best[rows - 1], s);
    }
  }
  nlohmann::json verify_ms = nlohmann::json::object(), verify_cost = nlohmann::json::object();
  for (int rows = 1; rows <= n_max + 1; ++rows) {
    verify_ms[std::to_string(rows)] = best[rows - 1] * 1e3;
    verify_cost[std::to_string(rows)] = best[rows - 1] / best[0];
  }

  // End to end: plain and speculative greedy decode of the same prompt, alternately.
  GenerateOptions gen;
  gen.max_new_tokens = f.decode_tokens;
  gen.ignore_eos = true;
  gen.prefill_chunk = cache.max_chunk();
  double plain_best = 0, spec_best = 0;
  GenerateResult spec_result;
  bool same_tokens = true;
  for (int r = 0; r < f.reps; ++r) {
    cache.Reset();
    G4_ASSIGN_OR_RETURN(GenerateResult plain, Generate(model, cache, prompt, gen));
    cache.Reset();
    setup.drafter->Reset();
    G4_ASSIGN_OR_RETURN(GenerateResult spec, GenerateSpeculative(model, cache, prompt, gen,
                                                                 *setup.drafter, setup.options));
    same_tokens = same_tokens && spec.tokens == plain.tokens;
    const double decoded = static_cast<double>(plain.tokens.size() - 1);
    plain_best = std::max(plain_best, decoded / std::max(1e-9, plain.decode_seconds));
    const double spec_tps = static_cast<double>(spec.tokens.size() - 1) / std::max(1e-9, spec.decode_seconds);
    if (spec_tps > spec_best) {
      spec_best = spec_tps;
      spec_result = spec;
    }
  }
  nlohmann::json j = SpecJson(spec_result);
  j["spec"] = f.spec.spec;
  j["draft"] = f.spec.draft;
  if (f.spec.spec == "mtp") j["draft_quant"] = f.spec.draft_quant;
  j["draft_max"] = n_max;
  j["context"] = ctx;
  j["verify_ms_by_rows"] = verify_ms;
  j["verify_cost_by_rows"] = verify_cost;
  j["plain_decode_tok_s"] = plain_best;
  j["spec_decode_tok_s"] = spec_best;
  j["speedup"] = plain_best > 0 ? spec_best / plain_best : 0.0;
  j["greedy_output_identical"] = same_tokens;
  return j;
}

void PrintSpecTable(const nlohmann::json& j) {
  std::printf("  speculative (%s, draft max %d, after %d tokens of context)\n",
              j["spec"].get<std::string>().c_str(), j["draft_max"].get<int>(), j["context"].get<int>());
  for (auto& [rows, cost] : j["verify_cost_by_rows"].items())
    std::printf("    verify pass of %-2s rows %20.2f ms  %5.2fx one row\n", rows.c_str(),
                j["verify_ms_by_rows"][rows].get<double>(), cost.get<double>());
  std::printf("    %-34s %10.1f%%\n", "acceptance", 100 * j["acceptance_rate"].get<double>());
  std::printf("    %-34s %10.2f\n", "tokens per target pass", j["tokens_per_target_pass"].get<double>());
  std::printf("    %-34s %10.1f%%\n", "draft time share", 100 * j["draft_time_share"].get<double>());
  std::printf("    %-34s %10.2f tok/s\n", "plain decode", j["plain_decode_tok_s"].get<double>());
  std::printf("    %-34s %10.2f tok/s (%.2fx)%s\n", "speculative decode",
              j["spec_decode_tok_s"].get<double>(), j["speedup"].get<double>(),
              j["greedy_output_identical"].get<bool>() ? "" : "  OUTPUT DIFFERS");
}

}  // namespace g4::cli
