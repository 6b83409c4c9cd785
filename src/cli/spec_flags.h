// The speculative-decoding options shared by `g4 run`, `g4 chat`, `g4 bench` and `g4 serve`
// (--spec, --draft, --draft-max, --draft-adaptive, --draft-p-min, --ngram-min, --ngram-max,
// --draft-quant), the drafter they make, and the generation call that uses it
// (docs/speculative.md).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "model/forward.h"
#include "model/loader.h"
#include "runtime/drafter.h"
#include "runtime/generate.h"
#include "runtime/speculative.h"

namespace g4::cli {

struct SpecFlags {
  std::string spec = "none";  // none | ngram | draft | mtp
  std::string draft;          // draft model (directory or artifact) for --spec draft, the
                              // assistant checkpoint directory for --spec mtp
  int draft_max = 4;
  bool adaptive = false;
  float p_min = 0;  // --draft-p-min: drafters stop before a token they give less probability
  int ngram_min = 1, ngram_max = 3;
  std::string draft_quant = "bf16";  // --draft-quant: the assistant's matrices (--spec mtp)
  bool enabled() const { return spec != "none"; }
};

void AddSpecOptions(CLI::App& app, SpecFlags& flags);

// Refuses inconsistent flags before anything loads.
Status CheckSpecFlags(const SpecFlags& flags);

// A drafter made from the flags, with the draft model it runs (if any).
struct SpecSetup {
  std::unique_ptr<Model> draft_model;
  std::unique_ptr<Drafter> drafter;
  SpeculativeOptions options;
};

// Checks the flags and builds the drafter for `target` (none when --spec is none). The draft
// model loads with `load` (the target's format and threads); `context` sizes its cache. Under
// tensor parallelism (`comm` set) only prompt lookup runs.
Result<SpecSetup> MakeSpecSetup(const SpecFlags& flags, Model& target,
                                const SamplingParams& sampling, int context,
                                const ModelOptions& load, const Communicator* comm);

// --draft-quant as a weight type (bf16 when the flags were not checked).
WeightType DraftQuant(const SpecFlags& flags);

// The prefill chunk a cache needs for these flags: at least draft_max + 1 rows.
int ChunkFor(const SpecFlags& flags, int chunk);

// Generate(), or GenerateSpeculative() when setup has a drafter.
Result<GenerateResult> GenerateWith(SpecSetup& setup, Model& model, KvCache& cache,
                                    const std::vector<int>& prompt, const GenerateOptions& options,
                                    const std::function<bool(int)>& on_token);

// "drafted 40, accepted 31 (78%), 3.1 tokens per target pass, drafting 4% of decode time".
std::string SpecSummary(const GenerateResult& result);
// The same as JSON fields: acceptance_rate, tokens_per_target_pass, draft_time_share...
nlohmann::json SpecJson(const GenerateResult& result);

}  // namespace g4::cli
