// g4 logits: teacher-forced logits (after softcap) for every position, as float32 .npy [n, vocab].
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/cli_util.h"
#include "cli/command.h"
#include "cli/tensor_parallel_command.h"
#include "io/npy.h"
#include "model/forward.h"
#include "model/loader.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"

namespace g4::cli {
namespace {

int RunLogits(int argc, char** argv) {
  CLI::App app{"Teacher-forced logits after softcap, float32 [n, vocab] in NumPy .npy format", "g4 logits"};
  std::string model_dir = DefaultModelPath(), ids_text, out;
  int threads = 0, chunk = 64, tp = 0;
  app.add_option("--model", model_dir, "model directory (Hugging Face layout)");
  app.add_option("--ids", ids_text, "comma-separated token ids")->required();
  app.add_option("--out", out, "output .npy file")->required();
  app.add_option("--threads", threads, "threads (0 = all cores)");
  std::string quant = "bf16";
  app.add_option("--quant", quant, "weight format: bf16 (as shipped), q8, q4")->check(CLI::IsMember({"bf16", "q8", "q4"}));
  app.add_option("--chunk", chunk, "prefill chunk size");
  std::string kv_type = "f32";
  app.add_option("--kv-type", kv_type, kKvTypeHelp)->check(CLI::IsMember({"f32", "bf16", "q8"}));
  app.add_option("--tp", tp, "tensor-parallel ranks: threads in this process, or one per process "
                 "under mpirun (default: 1, or mpirun's -np)");
  CLI11_PARSE(app, argc, argv);

  auto ids = ParseIdList(ids_text);
  if (!ids.ok()) return Fail("logits", ids.status());
  if (ids->empty()) return Fail("logits", Status::Error("--ids is empty"));
  ModelOptions options;
  options.threads = threads;
  ParseWeightType(quant, &options.load.quant);
  return RunTensorParallelCommand("logits", tp, [&](Communicator* comm) -> Status {
    const bool output_rank = IsOutputRank(comm);
    G4_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, LoadModel(model_dir, options.OnRanks(comm)));
    const ModelPlan& plan = model->plan();
    KvCache cache(plan, static_cast<int>(ids->size()), std::max(1, chunk), KvTypeOf(kv_type));
    Activations act;
    G4_ASSIGN_OR_RETURN(std::vector<float> logits, Prefill(*model, cache, *ids, chunk, /*all_rows=*/true, act));
    if (!output_rank) return OkStatus();
    ApplySoftcapInPlace(logits.data(), static_cast<int>(logits.size()), static_cast<float>(plan.softcap));
    G4_RETURN_IF_ERROR(WriteNpyF32(out, {static_cast<int64_t>(ids->size()), plan.vocab}, logits.data()));
    std::fprintf(stderr, "g4 logits: wrote [%zu, %d] to %s\n", ids->size(), plan.vocab, out.c_str());
    return OkStatus();
  });
}

}  // namespace

G4_COMMAND("logits", "teacher-forced logits for a token sequence, written as .npy", RunLogits);

}  // namespace g4::cli
