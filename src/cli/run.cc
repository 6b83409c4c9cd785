// g4 run: generate from a prompt (or token ids) with one sequence.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "cli/command.h"
#include "cli/sampling_flags.h"
#include "cli/spec_flags.h"
#include "cli/tensor_parallel_command.h"
#include "model/architecture.h"
#include "model/forward.h"
#include "model/loader.h"
#include "runtime/generate.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace g4::cli {
namespace {

int RunRun(int argc, char** argv) {
  CLI::App app{"Generate text with one sequence", "g4 run"};
  std::string model_dir = DefaultModelPath(), ids_text, prompt_text;
  int n = 32, threads = 0, chunk = 64, ctx = 0, tp = 0;
  SamplingFlags sampling;  // greedy unless --temperature > 0
  bool ignore_eos = false, json_out = false, chat = false, no_bos = false, thinking = false;
  app.add_option("--model", model_dir, "model directory (Hugging Face layout)");
  auto* prompt_opt = app.add_option("--prompt", prompt_text, "prompt text (a <bos> is prepended)");
  app.add_option("--ids", ids_text, "prompt as comma-separated token ids")->excludes(prompt_opt);
  app.add_flag("--chat", chat, "wrap the prompt in the Gemma-4 chat template as a user turn");
  app.add_flag("--thinking", thinking, "with --chat: enable thinking");
  app.add_flag("--no-bos", no_bos, "do not prepend <bos> to --prompt");
  app.add_option("-n,--max-tokens", n, "tokens to generate");
  AddSamplingOptions(app, sampling, "top-k sampling (0 = off)", "nucleus sampling");
  app.add_option("--threads", threads, "threads per rank (0 = all cores, shared among the ranks)");
  app.add_option("--tp", tp, "tensor-parallel ranks: threads in this process, or one per process "
                 "under mpirun (default: 1, or mpirun's -np)");
  std::string quant = "bf16";
  app.add_option("--quant", quant, "weight format: bf16 (as shipped), q8, q4")->check(CLI::IsMember({"bf16", "q8", "q4"}));
  app.add_option("--chunk", chunk, "prefill chunk size");
  app.add_option("--ctx", ctx, "context size (0 = prompt + n)");
  std::string kv_type = "f32";
  app.add_option("--kv-type", kv_type, kKvTypeHelp)->check(CLI::IsMember({"f32", "bf16", "q8"}));
  app.add_flag("--ignore-eos", ignore_eos, "do not stop at end-of-sequence tokens");
  app.add_flag("--json", json_out, "print one JSON object with ids and text");
  SpecFlags spec;
  AddSpecOptions(app, spec);
  CLI11_PARSE(app, argc, argv);
  if (Status st = CheckSpecFlags(spec); !st.ok()) return Fail("run", st);
  chunk = ChunkFor(spec, chunk);

  if (n < 0) return Fail("run", Status::Error("-n must be >= 0"));
  // The config first: it says what MODEL is (an assistant drafter, say) before a missing
  // tokenizer would. The tokenizer is checked at load: a missing one is an error now, not
  // garbage later.
  if (auto config = LoadModelConfig(model_dir); !config.ok()) return Fail("run", config.status());
  auto tokenizer = LoadModelTokenizer(model_dir);
  if (!tokenizer.ok()) return Fail("run", tokenizer.status());
  Result<std::vector<int>> prompt = std::vector<int>{};
  if (!ids_text.empty()) {
    prompt = ParseIdList(ids_text);
  } else if (chat) {
    auto chat_template = ChatTemplate::Load(model_dir);
    if (!chat_template.ok()) return Fail("run", chat_template.status());
    ChatTemplateRequest chat_request;
    chat_request.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", prompt_text}}});
    if (thinking) chat_request.kwargs["enable_thinking"] = true;
    auto text = chat_template->Render(chat_request);
    if (!text.ok()) return Fail("run", text.status());
    prompt = (*tokenizer)->Encode(*text);  // the template writes <bos> itself
  } else {
    prompt = (*tokenizer)->Encode(prompt_text, /*add_bos=*/!no_bos);
  }
  if (!prompt.ok()) return Fail("run", prompt.status());
  if (prompt->empty()) return Fail("run", Status::Error("the prompt is empty (give --prompt or --ids)"));

  ModelOptions options;
  options.threads = threads;
  ParseWeightType(quant, &options.load.quant);
  return RunTensorParallelCommand("run", tp, [&](Communicator* comm) -> Status {
    // Every rank runs the same steps on its share; only rank 0 writes.
    const bool output_rank = IsOutputRank(comm);
    G4_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, LoadModel(model_dir, options.OnRanks(comm)));
    const ModelPlan& plan = model->plan();
    for (int id : *prompt)
      if (id >= plan.vocab) return Status::Errorf("token id ", id, " is outside the vocabulary of ", plan.vocab);
    const int context = ctx > 0 ? ctx : static_cast<int>(prompt->size()) + n;
    if (plan.config.max_position_embeddings > 0 && context > plan.config.max_position_embeddings)
      return Status::Errorf("context ", context, " exceeds the model's max_position_embeddings ",
                            plan.config.max_position_embeddings);
    KvCache cache(plan, context, chunk, KvTypeOf(kv_type));
    G4_ASSIGN_OR_RETURN(SpecSetup speculative,
                        MakeSpecSetup(spec, *model, ToSamplingParams(sampling, plan.config.suppress_tokens),
                                      context, options, comm));
    GenerateOptions gen;
    gen.max_new_tokens = n;
    gen.ignore_eos = ignore_eos;
    gen.stop_ids = plan.config.eos_token_ids;
    gen.prefill_chunk = chunk;
    gen.sampling = ToSamplingParams(sampling, plan.config.suppress_tokens);
    IncrementalDecoder decoder(**tokenizer, /*skip_special=*/false);
    std::string text;
    auto is_stop = [&](int token) {
      return !ignore_eos && std::find(gen.stop_ids.begin(), gen.stop_ids.end(), token) != gen.stop_ids.end();
    };
    if (output_rank && !json_out && !prompt_text.empty() && !chat) std::printf("%s", prompt_text.c_str());
    G4_ASSIGN_OR_RETURN(GenerateResult result, GenerateWith(speculative, *model, cache, *prompt, gen, [&](int token) {
      if (!output_rank || is_stop(token)) return true;  // the stop token itself is not part of the text
      std::string piece = decoder.Add(token);
      text += piece;
      if (!json_out) {
        std::printf("%s", piece.c_str());
        std::fflush(stdout);
      }
      return true;
    }));
    if (!output_rank) return OkStatus();
    std::string tail = decoder.Flush();
    text += tail;
    if (json_out) {
      nlohmann::json j = {{"ids", result.tokens}, {"text", text}, {"finish_reason", result.finish_reason},
                          {"prompt_tokens", result.prompt_tokens}};
      if (spec.enabled()) j["speculative"] = SpecJson(result);
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("%s\n", tail.c_str());
    }
    std::string tp_note;
    if (comm) {
      const CommStats& cs = comm->stats();
      const size_t steps = result.prompt_tokens + result.tokens.size();
      tp_note = ", tp " + std::to_string(comm->size()) + ": " + std::to_string(cs.calls) + " collectives, " +
                std::to_string(cs.seconds * 1e3 / std::max<size_t>(1, steps)) + " ms/token in them";
    }
    std::fflush(stdout);
    std::fprintf(stderr, "[%d prompt tokens, %zu generated, prefill %.3f s, decode %.2f tok/s, %s%s]\n",
                 result.prompt_tokens, result.tokens.size(), result.prefill_seconds,
                 result.tokens.size() > 1 ? (result.tokens.size() - 1) / std::max(1e-9, result.decode_seconds) : 0.0,
                 result.finish_reason.c_str(), tp_note.c_str());
    if (spec.enabled()) std::fprintf(stderr, "[spec %s: %s]\n", spec.spec.c_str(), SpecSummary(result).c_str());
    return OkStatus();
  });
}

}  // namespace

G4_COMMAND("run", "generate text from a prompt or token ids", RunRun);

}  // namespace g4::cli
