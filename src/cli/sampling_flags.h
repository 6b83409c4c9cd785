// The sampling options shared by `g4 run` and `g4 chat` (--temperature, --top-k, --top-p, --seed)
// and the SamplingParams they make. Each command keeps its own defaults.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <vector>

#include "runtime/sampler.h"

namespace g4::cli {

struct SamplingFlags {
  float temperature = 0;
  int top_k = 0;
  float top_p = 1;
  int64_t seed = -1;  // < 0: unseeded
};

// Adds the four options to `app`, bound to `flags` (whose values are the defaults shown).
void AddSamplingOptions(CLI::App& app, SamplingFlags& flags, const char* top_k_help,
                        const char* top_p_help);

// The flags as SamplingParams, with the model's always-suppressed tokens.
SamplingParams ToSamplingParams(const SamplingFlags& flags, const std::vector<int>& suppress_tokens);

}  // namespace g4::cli
