#include "cli/sampling_flags.h"

namespace g4::cli {

void AddSamplingOptions(CLI::App& app, SamplingFlags& flags, const char* top_k_help,
                        const char* top_p_help) {
  app.add_option("--temperature", flags.temperature, "0 = greedy");
  app.add_option("--top-k", flags.top_k, top_k_help);
  app.add_option("--top-p", flags.top_p, top_p_help);
  app.add_option("--seed", flags.seed, "sampling seed");
}

SamplingParams ToSamplingParams(const SamplingFlags& flags, const std::vector<int>& suppress_tokens) {
  SamplingParams params;
  params.temperature = flags.temperature;
  params.top_k = flags.top_k;
  params.top_p = flags.top_p;
  params.suppress_tokens = suppress_tokens;
  if (flags.seed >= 0) {
    params.seed = static_cast<uint64_t>(flags.seed);
    params.has_seed = true;
  }
  return params;
}

}  // namespace g4::cli
