// g4 chat: an interactive multi-turn chat in the terminal. Streams tokens as they come and keeps
// the conversation in the KV cache: each turn only the new tokens are prefilled (the rendered
// conversation is compared with what the cache holds; the longest common prefix is kept).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "cli/cli_util.h"
#include "cli/command.h"
#include "cli/sampling_flags.h"
#include "cli/spec_flags.h"
#include "io/pack.h"
#include "model/architecture.h"
#include "model/forward.h"
#include "model/loader.h"
#include "runtime/generate.h"
#include "tokenizer/chat_gemma4.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace g4::cli {
namespace {

// Prints a reply as it streams: the thinking channel dimmed, tool calls in brackets.
class ReplyPrinter {
 public:
  void Show(const ChatOutput& out) {
    if (!out.reasoning.empty()) {
      if (!in_reasoning_) std::printf("\033[2m");
      in_reasoning_ = true;
      std::printf("%s", out.reasoning.c_str());
    }
    if (!out.content.empty()) {
      if (in_reasoning_) std::printf("\033[0m\n");
      in_reasoning_ = false;
      std::printf("%s", out.content.c_str());
    }
    for (const auto& call : out.tool_calls) std::printf("[tool call %s %s]", call.name.c_str(), call.arguments.c_str());
    std::fflush(stdout);
  }
  void End() {
    if (in_reasoning_) std::printf("\033[0m");
  }

 private:
  bool in_reasoning_ = false;
};

// Generates the reply to `fresh` (the cache holds what comes before it) and streams it to the
// terminal; *raw gets the reply's text as generated.
Result<GenerateResult> StreamReply(Model& model, KvCache& cache, const std::vector<int>& fresh,
                                   const GenerateOptions& gen, SpecSetup& spec,
                                   const Tokenizer& tokenizer, std::string* raw) {
  IncrementalDecoder decoder(tokenizer);
  Gemma4OutputParser parser;
  ReplyPrinter printer;
  auto result = GenerateWith(spec, model, cache, fresh, gen, [&](int token) {
    std::string piece = decoder.Add(token);
    *raw += piece;
    printer.Show(parser.Push(piece));
    return true;
  });
  std::string tail = decoder.Flush();
  *raw += tail;
  printer.Show(parser.Push(tail));
  printer.Show(parser.Finish());
  printer.End();
  return result;
}

// Keeps the longest common prefix of `cached` (what the cache holds) and `ids` (the rendered
// conversation) that the cache can rewind to, at least one token short of `ids` so that a new
// token produces the next logits. Returns the number of tokens kept.
size_t KeepCommonPrefix(KvCache& cache, std::vector<int>& cached, const std::vector<int>& ids) {
  size_t keep = 0;
  while (keep < cached.size() && keep < ids.size() && cached[keep] == ids[keep]) ++keep;
  if (keep == ids.size()) --keep;  // at least one new token produces the next logits
  if (!cache.CanTruncateTo(static_cast<int64_t>(keep))) keep = 0;
  cache.set_n_past(static_cast<int64_t>(keep));
  cached.resize(keep);
  return keep;
}

int RunChat(int argc, char** argv) {
  CLI::App app{"Interactive chat (type /reset to start over, /quit or Ctrl-D to leave)", "g4 chat"};
  std::string model_dir = DefaultModelPath(), system_prompt;
  int n = 512, threads = 0, ctx = 4096;
  SamplingFlags sampling{.temperature = 0, .top_k = 64, .top_p = 0.95f, .seed = -1};
  bool thinking = false;
  app.add_option("--model", model_dir, "model directory (Hugging Face layout)");
  app.add_option("--system", system_prompt, "system prompt");
  app.add_option("-n,--max-tokens", n, "most tokens per reply");
  app.add_option("--ctx", ctx, "context size");
  AddSamplingOptions(app, sampling, "top-k when sampling", "top-p when sampling");
  app.add_option("--threads", threads, "threads (0 = all cores)");
  app.add_flag("--thinking", thinking, "enable the model's thinking channel");
  SpecFlags spec;
  AddSpecOptions(app, spec);
  CLI11_PARSE(app, argc, argv);
  if (Status st = CheckSpecFlags(spec); !st.ok()) return Fail("chat", st);

  // The config first: it says what MODEL is (an assistant drafter, say) before a missing
  // tokenizer would.
  if (auto config = LoadModelConfig(model_dir); !config.ok()) return Fail("chat", config.status());
  auto tokenizer = LoadModelTokenizer(model_dir);
  if (!tokenizer.ok()) return Fail("chat", tokenizer.status());
  ModelOptions options;
  options.threads = threads;
  auto model = LoadModel(model_dir, options);
  if (!model.ok()) return Fail("chat", model.status());
  const ModelPlan& plan = (*model)->plan();
  if (plan.config.max_position_embeddings > 0) ctx = std::min(ctx, plan.config.max_position_embeddings);
  auto chat_template = ChatTemplate::Load(model_dir);
  if (!chat_template.ok()) return Fail("chat", chat_template.status());
  ChatTemplateRequest chat_request;
  if (thinking) chat_request.kwargs["enable_thinking"] = true;

  const int chunk = ChunkFor(spec, 64);
  KvCache cache(plan, ctx, chunk);
  auto speculative = MakeSpecSetup(spec, **model, ToSamplingParams(sampling, plan.config.suppress_tokens),
                                   ctx, options, nullptr);
  if (!speculative.ok()) return Fail("chat", speculative.status());
  std::vector<int> cached;  // the tokens the cache holds, in order
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!system_prompt.empty()) messages.push_back({{"role", "system"}, {"content", system_prompt}});
  std::vector<int> stop_ids = plan.config.eos_token_ids;
  for (int id : Gemma4StopTokenIds(**tokenizer))
    if (std::find(stop_ids.begin(), stop_ids.end(), id) == stop_ids.end()) stop_ids.push_back(id);

  std::fprintf(stderr, "g4 chat: %s (%d layers, context %d; chat template: %s). /reset starts over, /quit leaves.\n",
               model_dir.c_str(), plan.n_layers(), ctx, chat_template->Describe().c_str());
  std::string line;
  while (true) {
    std::printf("\n> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line == "/quit" || line == "/exit") break;
    if (line == "/reset") {
      messages = nlohmann::ordered_json::array();
      if (!system_prompt.empty()) messages.push_back({{"role", "system"}, {"content", system_prompt}});
      cache.Reset();
      cached.clear();
      std::printf("(conversation cleared)\n");
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    chat_request.messages = messages;
    auto text = chat_template->Render(chat_request);
    if (!text.ok()) {
      std::fprintf(stderr, "error: %s\n", text.status().message().c_str());
      messages.erase(messages.end() - 1);
      continue;
    }
    std::vector<int> ids = (*tokenizer)->Encode(*text);  // the template writes <bos> itself
    // Keep the longest common prefix that the cache can rewind to; prefill the rest.
    const size_t keep = KeepCommonPrefix(cache, cached, ids);
    if (static_cast<int>(ids.size()) + 1 >= ctx) {
      std::fprintf(stderr, "error: the conversation (%zu tokens) no longer fits the context of %d; /reset\n",
                   ids.size(), ctx);
      messages.erase(messages.end() - 1);
      continue;
    }
    const std::vector<int> fresh(ids.begin() + static_cast<long>(keep), ids.end());
    GenerateOptions gen;
    gen.max_new_tokens = std::min(n, ctx - static_cast<int>(ids.size()));
    gen.stop_ids = stop_ids;
    gen.prefill_chunk = chunk;
    gen.sampling = ToSamplingParams(sampling, plan.config.suppress_tokens);
    std::string raw;
    speculative->options.cached = &cached;  // prompt lookup sees the whole conversation
    auto result = StreamReply(**model, cache, fresh, gen, *speculative, **tokenizer, &raw);
    if (!result.ok()) {
      std::fprintf(stderr, "\nerror: %s\n", result.status().message().c_str());
      cache.Reset();
      cached.clear();
      messages.erase(messages.end() - 1);
      continue;
    }
    cached.insert(cached.end(), ids.begin() + static_cast<long>(keep), ids.end());
    cached.insert(cached.end(), result->tokens.begin(), result->tokens.end());
    // The cache holds the last generated token only if it was fed back (not when it ended the turn).
    cached.resize(static_cast<size_t>(cache.n_past()));
    ChatOutput parsed = ParseGemma4Output(raw);
    nlohmann::ordered_json reply = {{"role", "assistant"}, {"content", parsed.content}};
    messages.push_back(reply);
    std::fprintf(stderr, "\n[%zu tokens, %.1f tok/s%s]", result->tokens.size(),
                 result->tokens.size() > 1 ? (result->tokens.size() - 1) / std::max(1e-9, result->decode_seconds) : 0.0,
                 result->finish_reason == "length" ? ", cut at the token limit" : "");
    if (spec.enabled()) std::fprintf(stderr, "\n[spec %s: %s]", spec.spec.c_str(), SpecSummary(*result).c_str());
  }
  std::printf("\n");
  return 0;
}

}  // namespace

G4_COMMAND("chat", "interactive multi-turn chat in the terminal", RunChat);

}  // namespace g4::cli
