#include "cli/spec_flags.h"

#include <algorithm>
#include <cstdio>

#include "model/assistant.h"
#include "runtime/draft_model_drafter.h"
#include "runtime/mtp_drafter.h"
#include "runtime/ngram_drafter.h"

namespace g4::cli {

void AddSpecOptions(CLI::App& app, SpecFlags& flags) {
  app.add_option("--spec", flags.spec,
                 "speculative decoding: ngram (prompt lookup), draft (a smaller model, --draft), "
                 "mtp (Gemma-4's assistant drafter, --draft ASSISTANT_DIR), none")
      ->check(CLI::IsMember({"none", "ngram", "draft", "mtp"}));
  app.add_option("--draft", flags.draft, "draft model for --spec draft (same vocabulary), or the assistant checkpoint for --spec mtp");
  app.add_option("--draft-max", flags.draft_max, "tokens drafted per target pass");
  app.add_flag("--draft-adaptive", flags.adaptive,
               "shrink the draft after a rejection, grow it after a fully accepted one");
  app.add_option("--draft-p-min", flags.p_min,
                 "mtp and draft: stop a draft before a step whose most likely token has a "
                 "probability below P (0: draft --draft-max tokens every pass)");
  app.add_option("--ngram-min", flags.ngram_min, "prompt lookup: shortest suffix matched");
  app.add_option("--ngram-max", flags.ngram_max, "prompt lookup: longest suffix matched");
  app.add_option("--draft-quant", flags.draft_quant,
                 "--spec mtp: the assistant's matrices as shipped (bf16) or quantized (q8, q4); "
                 "drafts only propose, the output stays the target's");  // CheckSpecFlags checks it
}

WeightType DraftQuant(const SpecFlags& flags) {
  WeightType quant = WeightType::kBF16;
  ParseWeightType(flags.draft_quant, &quant);  // CheckSpecFlags refuses anything else
  return quant;
}

int ChunkFor(const SpecFlags& flags, int chunk) {
  return flags.enabled() ? std::max(chunk, flags.draft_max + 1) : chunk;
}

Status CheckSpecFlags(const SpecFlags& flags) {
  if (!flags.enabled()) {
    if (!flags.draft.empty()) return Status::Error("--draft needs --spec draft or --spec mtp");
    if (flags.draft_quant != "bf16") return Status::Error("--draft-quant needs --spec mtp");
    return OkStatus();
  }
  if (flags.spec == "mtp" && flags.draft.empty())
    return Status::Error("--spec mtp needs --draft ASSISTANT_DIR (the target's assistant checkpoint)");
  if (flags.draft_max < 1 || flags.draft_max > 64)
    return Status::Errorf("--draft-max must be between 1 and 64, not ", flags.draft_max);
  if (!(flags.p_min >= 0 && flags.p_min <= 1))
    return Status::Errorf("--draft-p-min must be between 0 and 1, not ", flags.p_min);
  if (flags.spec == "ngram") {
    if (!flags.draft.empty()) return Status::Error("--draft is for --spec draft, not ngram");
    if (flags.p_min > 0)
      return Status::Error(
          "--draft-p-min needs a drafter with probabilities (--spec mtp or draft); prompt lookup "
          "has none");
    if (flags.ngram_min < 1 || flags.ngram_max < flags.ngram_min)
      return Status::Errorf("--ngram-min must be >= 1 and <= --ngram-max (got ", flags.ngram_min,
                            " and ", flags.ngram_max, ")");
  }
  if (flags.spec == "draft" && flags.draft.empty()) return Status::Error("--spec draft needs --draft MODEL");
  WeightType quant;
  if (!ParseWeightType(flags.draft_quant, &quant) || quant == WeightType::kF32)
    return Status::Errorf("--draft-quant must be bf16, q8 or q4, not ", flags.draft_quant);
  if (flags.spec != "mtp" && flags.draft_quant != "bf16")
    return Status::Error(
        "--draft-quant is for --spec mtp (the assistant); a --spec draft model loads in the "
        "target's --quant");
  return OkStatus();
}

Result<SpecSetup> MakeSpecSetup(const SpecFlags& flags, Model& target,
                                const SamplingParams& sampling, int context,
                                const ModelOptions& load, const Communicator* comm) {
  G4_RETURN_IF_ERROR(CheckSpecFlags(flags));
  SpecSetup setup;
  if (!flags.enabled()) return setup;
  setup.options.draft_max = flags.draft_max;
  setup.options.adaptive = flags.adaptive;
  setup.options.draft_p_min = flags.p_min;
  if (flags.spec == "ngram") {
    setup.drafter = std::make_unique<NgramDrafter>(flags.ngram_min, flags.ngram_max);
    return setup;
  }
  if (flags.spec == "mtp") {
    // Every rank runs this (the same generation on each): the assistant drafts in lockstep.
    G4_ASSIGN_OR_RETURN(
        std::unique_ptr<Assistant> assistant,
        Assistant::Load(flags.draft, target, target.communicator(), DraftQuant(flags)));
    setup.drafter = std::make_unique<MtpDrafter>(std::move(assistant));
    return setup;
  }
  if (comm)
    return Status::Error("--spec draft does not run tensor parallel yet; use --spec ngram or mtp");
  ModelOptions draft_load = load;
  draft_load.comm = nullptr;
  draft_load.tp = 1;
  draft_load.rank = 0;
  G4_ASSIGN_OR_RETURN(setup.draft_model, LoadModel(flags.draft, draft_load));
  G4_ASSIGN_OR_RETURN(setup.drafter,
                      DraftModelDrafter::Create(*setup.draft_model, target.plan().vocab, sampling,
                                                context, flags.draft_max + 1));
  return setup;
}

Result<GenerateResult> GenerateWith(SpecSetup& setup, Model& model, KvCache& cache,
                                    const std::vector<int>& prompt, const GenerateOptions& options,
                                    const std::function<bool(int)>& on_token) {
  if (!setup.drafter) return Generate(model, cache, prompt, options, on_token);
  return GenerateSpeculative(model, cache, prompt, options, *setup.drafter, setup.options, on_token);
}

nlohmann::json SpecJson(const GenerateResult& r) {
  const size_t decoded = r.tokens.empty() ? 0 : r.tokens.size() - 1;  // the first is the prefill's
  return {{"target_passes", r.target_passes},
          {"drafted", r.drafted},
          {"accepted", r.accepted},
          {"acceptance_rate", r.drafted ? static_cast<double>(r.accepted) / r.drafted : 0.0},
          {"tokens_per_target_pass",
           r.target_passes ? static_cast<double>(decoded) / r.target_passes : 0.0},
          {"draft_time_share", r.decode_seconds > 0 ? r.draft_seconds / r.decode_seconds : 0.0}};
}

std::string SpecSummary(const GenerateResult& r) {
  const nlohmann::json j = SpecJson(r);
  char line[200];
  std::snprintf(line, sizeof line,
                "drafted %lld, accepted %lld (%.0f%%), %.2f tokens per target pass, drafting %.1f%% "
                "of decode time",
                static_cast<long long>(r.drafted), static_cast<long long>(r.accepted),
                100 * j["acceptance_rate"].get<double>(), j["tokens_per_target_pass"].get<double>(),
                100 * j["draft_time_share"].get<double>());
  return line;
}

}  // namespace g4::cli
