// Single-sequence generation: prefill the prompt in chunks, then decode token by token.
// One token callback serves the CLI, bench and tests (return false to stop early).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "grammar/token_mask.h"
#include "runtime/sampler.h"

namespace g4 {

struct GenerateOptions {
  int max_new_tokens = 32;
  SamplingParams sampling;
  std::vector<int> stop_ids;  // usually the model's eos ids
  bool ignore_eos = false;
  int prefill_chunk = 64;     // rows per prefill call; must be <= the cache's max_chunk
  // Constrained output: tokens come from its mask; generation ends ("stop") once the grammar is
  // complete with nothing left to add. Not owned; advanced in place.
  grammar::TokenConstraint* constraint = nullptr;
};

struct GenerateResult {
  std::vector<int> tokens;       // generated ids (a stop id that ended generation is included)
  std::string finish_reason;     // "stop", "length" or "cancelled"
  int prompt_tokens = 0;
  double prefill_seconds = 0;    // until the first token's logits
  double decode_seconds = 0;
  // Target forward passes after the prefill, and with speculative decoding the tokens drafted,
  // the drafted tokens accepted and the time spent drafting (inside decode_seconds).
  int64_t target_passes = 0;
  int64_t drafted = 0;
  int64_t accepted = 0;
  double draft_seconds = 0;
};

// How constrained generation fails (Generate, GenerateSpeculative, the scheduler): no token can
// continue the grammar (TokenConstraint::StuckReason), or the sampler had to pick a token outside
// the mask.
inline constexpr char kGrammarSuppressedError[] =
    "every token the grammar allows here has probability 0 (suppressed)";

// Appends `prompt` to the cache (which may already hold earlier turns) and generates.
Result<GenerateResult> Generate(Model& model, KvCache& cache, const std::vector<int>& prompt,
                                const GenerateOptions& options,
                                const std::function<bool(int token)>& on_token = nullptr);

// Runs `ids` through the model and returns the raw logits of the last row (or of every row when
// all_rows), continuing from the cache's current position.
Result<std::vector<float>> Prefill(Model& model, KvCache& cache, const std::vector<int>& ids,
                                   int chunk, bool all_rows, Activations& act);

}  // namespace g4
