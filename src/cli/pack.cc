// g4 pack: convert a Hugging Face checkpoint once into one artifact that loads by mapping
// (io/pack.h, model/pack_writer.h).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "cli/cli_util.h"
#include "cli/command.h"
#include "model/arch/gemma4_assistant.h"
#include "model/assistant_weights.h"
#include "model/pack_writer.h"

namespace g4::cli {
namespace {

int RunPack(int argc, char** argv) {
  CLI::App app{"Write a packed artifact: weights in kernel layout and format, tokenizer, plan, config, checksums",
               "g4 pack"};
  std::string model_dir, out, quant = "bf16";
  int tp = 1, threads = 0;
  app.add_option("--model", model_dir, "model or assistant directory (Hugging Face layout)")
      ->required();
  app.add_option("--quant", quant, "weight format: bf16 (as shipped), q8, q4")->check(CLI::IsMember({"bf16", "q8", "q4"}));
  app.add_option(
      "--tp", tp,
      "tensor-parallel ranks: each rank's slices in its own sections (load with the same --tp)");
  app.add_option("--threads", threads, "threads (0 = all cores)");
  app.add_option("--out", out, "artifact file to write")->required();
  CLI11_PARSE(app, argc, argv);

  if (IsAssistantCheckpoint(model_dir)) {
    // An assistant drafter: its own tensors in one artifact for `--spec mtp --draft FILE`.
    if (tp != 1)
      return Fail("pack", Status::Error("an assistant artifact holds one rank (--tp 1): every "
                                        "rank of a tensor-parallel target loads it whole"));
    WeightType assistant_quant;
    ParseWeightType(quant, &assistant_quant);
    PackModelStats stats;
    Status st = PackAssistant(model_dir, out, assistant_quant, threads, &stats);
    if (!st.ok()) return Fail("pack", st);
    std::fprintf(stderr,
                 "g4 pack: wrote assistant %s (%s, %d sections, %.1f MB): load+convert %.2f s, "
                 "write+checksum %.2f s\n",
                 out.c_str(), quant.c_str(), stats.sections, stats.bytes / 1e6, stats.load_seconds,
                 stats.write_seconds);
    return 0;
  }
  PackModelOptions options;
  ParseWeightType(quant, &options.quant);
  options.tp = tp;
  options.threads = threads;
  PackModelStats stats;
  Status st = PackModel(model_dir, out, options, &stats);
  if (!st.ok()) return Fail("pack", st);
  std::fprintf(stderr,
               "g4 pack: wrote %s (%s, tp %d, %d sections, %.1f MB): load+convert %.2f s, "
               "write+checksum %.2f s\n",
               out.c_str(), quant.c_str(), tp, stats.sections, stats.bytes / 1e6,
               stats.load_seconds, stats.write_seconds);
  return 0;
}

}  // namespace

G4_COMMAND("pack", "convert a checkpoint into one artifact that loads by mapping", RunPack);

}  // namespace g4::cli
