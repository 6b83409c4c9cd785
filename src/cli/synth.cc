// g4 synth: writes a seeded random Gemma-4 checkpoint in the Hugging Face layout (model/synth.h).
#include "model/synth.h"
#include "model/synth_assistant.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "cli/command.h"

namespace g4::cli {
namespace {

int RunSynth(int argc, char** argv) {
  CLI::App app{"Write a synthetic Gemma-4 checkpoint (seeded random weights, real layout)",
               "g4 synth"};
  std::string preset, scale = "tiny", out, form = "flat", dtype = "bf16";
  SynthOptions options;
  app.add_option("--preset", preset, "e2b, e4b or 12b; e2b-assistant, e4b-assistant or 12b-assistant (a drafter for that target)")->required();
  app.add_option("--scale", scale, "tiny (small, every structural feature) or full (real sizes)");
  app.add_option("--out", out, "output directory")->required();
  app.add_option("--seed", options.seed, "random seed");
  app.add_option("--tokenizer", options.tokenizer, "tokenizer.json to copy (default: assets)");
  app.add_option("--vocab", options.vocab, "vocabulary size override (default 262144)");
  app.add_option("--config-form", form, "flat (global_head_dim) or per_layer (per_layer_config)");
  app.add_option("--shards", options.shards, "number of safetensors shards");
  app.add_option("--dtype", dtype, "bf16, f16 or f32");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (form == "flat") {
    options.config_form = SynthConfigForm::kFlat;
  } else if (form == "per_layer") {
    options.config_form = SynthConfigForm::kPerLayer;
  } else {
    std::fprintf(stderr, "g4 synth: --config-form must be flat or per_layer, got \"%s\"\n",
                 form.c_str());
    return 2;
  }
  if (dtype == "bf16") {
    options.dtype = DType::kBF16;
  } else if (dtype == "f16") {
    options.dtype = DType::kF16;
  } else if (dtype == "f32") {
    options.dtype = DType::kF32;
  } else {
    std::fprintf(stderr, "g4 synth: --dtype must be bf16, f16 or f32, got \"%s\"\n", dtype.c_str());
    return 2;
  }
  if (IsAssistantPreset(preset)) {
    auto aspec = SynthAssistantPreset(preset, scale);
    Status st = aspec.ok() ? WriteSynthAssistant(*aspec, options, out) : aspec.status();
    if (!st.ok()) {
      std::fprintf(stderr, "g4 %s\n", st.message().c_str());
      return aspec.ok() ? 1 : 2;
    }
    std::printf("wrote %s %s assistant checkpoint (seed %llu) to %s\n", preset.c_str(),
                scale.c_str(), static_cast<unsigned long long>(options.seed), out.c_str());
    return 0;
  }
  if (options.tokenizer.empty()) options.tokenizer = DefaultTokenizerPath();
  auto spec = SynthPreset(preset, scale);
  if (!spec.ok()) {
    std::fprintf(stderr, "g4 %s\n", spec.status().message().c_str());
    return 2;
  }
  Status st = WriteSynthCheckpoint(*spec, options, out);
  if (!st.ok()) {
    std::fprintf(stderr, "g4 %s\n", st.message().c_str());
    return 1;
  }
  std::printf("wrote %s %s checkpoint (seed %llu) to %s\n", preset.c_str(), scale.c_str(),
              static_cast<unsigned long long>(options.seed), out.c_str());
  return 0;
}

}  // namespace

G4_COMMAND("synth", "write a synthetic Gemma-4 checkpoint (random weights, real layout)", RunSynth);

}  // namespace g4::cli
