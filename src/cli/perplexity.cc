// g4 perplexity: perplexity of a model over a text file in windows of --ctx tokens, scored on the
// second half of each window (runtime/perplexity.h, docs/perplexity.md); --save-logits keeps the
// per-position distributions (top-K), --kl-base compares this run with a saved one.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli_util.h"
#include "cli/command.h"
#include "cli/tensor_parallel_command.h"
#include "model/loader.h"
#include "runtime/perplexity.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace g4::cli {
namespace {

// What --chat puts before the text: a user turn asking to continue, and the model turn's opening.
constexpr const char* kChatInstruction = "Continue the text.";

struct PerplexityArgs {
  std::string model = DefaultModelPath(), quant = "bf16", file, save_logits, kl_base;
  int ctx = 512, batch = 128, stride = 0, threads = 0, top_k = 256, tp = 0;
  bool chat = false, json = false;
};

// "[=======>      ] 12/40 windows  PPL 14.21" on a terminal (redrawn); else one line per tenth.
class ProgressBar {
 public:
  explicit ProgressBar(int total) : total_(total), tty_(isatty(STDERR_FILENO)) {}
  void Update(int done, double ppl) {
    if (tty_) {
      const int width = 30, filled = width * done / std::max(1, total_);
      std::fprintf(stderr, "\r[%s%s] %d/%d windows  PPL %.4f", std::string(filled, '=').c_str(),
                   std::string(width - filled, ' ').c_str(), done, total_, ppl);
      if (done == total_) std::fprintf(stderr, "\n");
    } else if (done * 10 / std::max(1, total_) != (done - 1) * 10 / std::max(1, total_) || done == total_) {
      std::fprintf(stderr, "g4 perplexity: %d/%d windows, PPL %.4f\n", done, total_, ppl);
    }
  }

 private:
  int total_;
  bool tty_;
};

Result<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Errorf("cannot open --file ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The tokens every window starts with: <bos>, or with --chat the rendered user turn and the
// model turn's opening ("<bos><|turn>user\nContinue the text.<turn|>\n<|turn>model\n").
Result<std::vector<int>> WindowPrefix(const PerplexityArgs& args, const Tokenizer& tokenizer) {
  if (!args.chat) return tokenizer.Encode("", /*add_bos=*/true);
  G4_ASSIGN_OR_RETURN(ChatTemplate chat_template, ChatTemplate::Load(args.model));
  ChatTemplateRequest request;
  request.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", kChatInstruction}}});
  G4_ASSIGN_OR_RETURN(std::string text, chat_template.Render(request));
  return tokenizer.Encode(text);  // the template writes <bos> itself
}

// A saved run must describe the same windows over the same vocabulary as this one.
Status CheckBaseMatches(const LogitsFileHeader& base, const LogitsFileHeader& now, const std::string& path) {
  auto differs = [&](const char* what, uint64_t a, uint64_t b) {
    return Status::Errorf("--kl-base ", path, " was saved with ", what, " ", a, ", this run has ", b);
  };
  if (base.vocab != now.vocab) return differs("vocab", base.vocab, now.vocab);
  if (base.ctx != now.ctx) return differs("--ctx", base.ctx, now.ctx);
  if (base.stride != now.stride) return differs("stride", base.stride, now.stride);
  if (base.flags != now.flags)
    return Status::Errorf("--kl-base ", path, " was saved ", (base.flags & kLogitsFileChat) ? "with" : "without",
                          " --chat; this run is ", (now.flags & kLogitsFileChat) ? "with" : "without", " it");
  if (base.positions != now.positions) return differs("scored positions", base.positions, now.positions);
  if (base.tokens_hash != now.tokens_hash)
    return Status::Errorf("--kl-base ", path, " was saved over other tokens (a different text or tokenizer)");
  return OkStatus();
}

nlohmann::json KlJson(const KlSummary& k) {
  return {{"positions", k.positions}, {"mean_kl", k.mean_kl}, {"median_kl", k.median_kl}, {"p99_kl", k.p99_kl},
          {"max_kl", k.max_kl}, {"same_top1", k.same_top1}, {"mean_delta_p", k.mean_dp}, {"rms_delta_p", k.rms_dp},
          {"base_ppl", k.base_ppl}, {"ppl", k.ppl}, {"mean_ln_ppl_ratio", k.mean_log_ppl_ratio}};
}

// What every rank needs before the model loads: the tokens and the saved base run.
struct PerplexityInput {
  std::vector<int> text_ids, prefix;
  LogitsFile base;
};

// The windows, planned once the model's context limit is known (its error comes first).
struct WindowPlan {
  std::vector<PerplexityWindow> windows;
  int stride = 0;
  int64_t scored = 0;
};

Result<PerplexityInput> PrepareInput(const PerplexityArgs& args) {
  if (args.ctx < 2) return Status::Errorf("--ctx must be >= 2 (got ", args.ctx, ")");
  G4_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, LoadModelTokenizer(args.model));
  G4_ASSIGN_OR_RETURN(std::string text, ReadTextFile(args.file));
  PerplexityInput in;
  in.text_ids = tokenizer->Encode(text);
  G4_ASSIGN_OR_RETURN(in.prefix, WindowPrefix(args, *tokenizer));
  if (!args.kl_base.empty()) {
    G4_ASSIGN_OR_RETURN(in.base, ReadLogitsFile(args.kl_base));
  }
  return in;
}

// Everything the output rank learns from the scored rows.
struct PerplexityTotals {
  PerplexityAccumulator acc;
  std::vector<KlSample> kl_samples;
  double seconds = 0;
};

void PrintReport(const PerplexityArgs& args, const PerplexityInput& in, const WindowPlan& wp, const PerplexityTotals& t,
                 const LogitsFileHeader& header, int tp) {
  nlohmann::json out = {{"model", args.model}, {"quant", args.quant}, {"file", args.file},
                        {"tokens", in.text_ids.size()}, {"windows", wp.windows.size()}, {"ctx", args.ctx},
                        {"stride", wp.stride}, {"prefix_tokens", in.prefix.size()}, {"chat", args.chat},
                        {"scored", wp.scored}, {"ppl", t.acc.Perplexity()}, {"ppl_error", t.acc.PerplexityError()},
                        {"mean_nll", t.acc.MeanNll()}, {"seconds", t.seconds}, {"tp", tp}};
  KlSummary kl;
  if (!args.kl_base.empty()) {
    kl = SummarizeKl(t.kl_samples);
    out["kl"] = KlJson(kl);
  }
  if (args.json) {
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::printf("PPL = %.4f +/- %.4f  (mean NLL %.5f nats over %lld tokens, %.1f s, %.0f tokens/s)\n",
              t.acc.Perplexity(), t.acc.PerplexityError(), t.acc.MeanNll(), static_cast<long long>(wp.scored),
              t.seconds, wp.windows.size() * args.ctx / std::max(t.seconds, 1e-9));
  if (!args.kl_base.empty()) {
    std::printf("vs %s: PPL(base) %.4f, ln(PPL/PPL(base)) %+.5f\n", args.kl_base.c_str(), kl.base_ppl,
                kl.mean_log_ppl_ratio);
    std::printf("KL divergence (nats): mean %.6f, median %.6f, p99 %.6f, max %.6f\n", kl.mean_kl, kl.median_kl,
                kl.p99_kl, kl.max_kl);
    std::printf("same top-1 token: %.2f%%   delta p(target): mean %+.5f, rms %.5f\n", 100 * kl.same_top1, kl.mean_dp,
                kl.rms_dp);
  }
  if (header.k && !args.save_logits.empty())
    std::printf("saved %lld positions (top-%u, %zu bytes each) to %s\n", static_cast<long long>(wp.scored), header.k,
                LogitsRecordBytes(header.k), args.save_logits.c_str());
}

// One rank's run (every rank under --tp; comm null without). Every rank makes the same Forward
// calls; only the output rank scores the rows, and it holds any error of its own until the loop
// is over, so no peer is left waiting in a collective.
Status RunPerplexityRank(const PerplexityArgs& args, const PerplexityInput& in, Communicator* comm) {
  const bool output_rank = IsOutputRank(comm);
  ModelOptions options;
  options.threads = args.threads;
  ParseWeightType(args.quant, &options.load.quant);
  G4_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, LoadModel(args.model, options.OnRanks(comm)));
  const ModelPlan& plan = model->plan();
  if (plan.config.max_position_embeddings > 0 && args.ctx > plan.config.max_position_embeddings)
    return Status::Errorf("--ctx ", args.ctx, " exceeds the model's max_position_embeddings ",
                          plan.config.max_position_embeddings);
  WindowPlan wp;
  G4_ASSIGN_OR_RETURN(wp.windows, PlanPerplexityWindows(in.prefix, in.text_ids, args.ctx, args.stride));
  wp.stride = args.stride ? args.stride : args.ctx - static_cast<int>(in.prefix.size());
  for (const auto& w : wp.windows) wp.scored += args.ctx - w.first_scored;
  LogitsFileHeader header;
  header.k = args.save_logits.empty() ? 0 : static_cast<uint32_t>(std::min(args.top_k, plan.vocab));
  header.vocab = static_cast<uint32_t>(plan.vocab);
  header.ctx = static_cast<uint32_t>(args.ctx);
  header.stride = static_cast<uint32_t>(wp.stride);
  header.flags = args.chat ? kLogitsFileChat : 0;
  header.positions = static_cast<uint64_t>(wp.scored);
  header.tokens_hash = HashPerplexityWindows(wp.windows);
  if (!args.kl_base.empty()) G4_RETURN_IF_ERROR(CheckBaseMatches(in.base.header, header, args.kl_base));
  // Only the output rank writes; all ranks agree it could before any of them enters the loop.
  std::unique_ptr<LogitsFileWriter> writer;
  Status setup = OkStatus();
  if (output_rank && header.k) {
    auto created = LogitsFileWriter::Create(args.save_logits, header);
    if (created.ok()) writer = std::move(*created);
    else setup = created.status();
  }
  if (comm) {
    float failed = setup.ok() ? 0.0f : 1.0f;
    comm->AllReduceSum(&failed, 1);
    if (setup.ok() && failed > 0) return Status::Errorf("rank ", comm->rank(), ": rank 0 could not start the run");
  }
  G4_RETURN_IF_ERROR(setup);

  if (output_rank && !args.json)
    std::printf("g4 perplexity: %s (%s%s), %s: %zu tokens, %zu windows of %d (stride %d, %zu prefix), %lld scored\n",
                args.model.c_str(), args.quant.c_str(), comm ? (", tp " + std::to_string(comm->size())).c_str() : "",
                args.file.c_str(), in.text_ids.size(), wp.windows.size(), args.ctx, wp.stride, in.prefix.size(),
                static_cast<long long>(wp.scored));
  std::fflush(stdout);
  PerplexityTotals totals;
  RowScorer scorer(&model->pool(), plan.vocab);
  std::vector<RowScore> scores;
  std::vector<const TopKRecord*> bases;
  size_t position = 0;
  Status deferred = OkStatus();
  ProgressBar bar(static_cast<int>(wp.windows.size()));
  const auto t0 = std::chrono::steady_clock::now();
  // The other ranks make the same Forward calls and score nothing (no softcap over their rows).
  std::function<Status(const std::vector<ScoredRow>&)> score_rows;
  if (output_rank)
    score_rows = [&](const std::vector<ScoredRow>& rows) -> Status {
      if (!deferred.ok()) return OkStatus();
      bases.clear();
      if (!in.base.records.empty())
        for (size_t r = 0; r < rows.size(); ++r) bases.push_back(&in.base.records[position + r]);
      scorer.Score(rows, static_cast<int>(header.k), bases, scores);
      for (size_t r = 0; r < rows.size(); ++r, ++position) {
        totals.acc.Add(scores[r].logprob);
        if (writer && deferred.ok()) deferred = writer->Append(scores[r].top);
        if (bases.empty()) continue;
        if (bases[r]->target != rows[r].target && deferred.ok())
          deferred = Status::Errorf("--kl-base ", args.kl_base, ": position ", position, " scores token ",
                                    bases[r]->target, ", this run token ", rows[r].target);
        totals.kl_samples.push_back(scores[r].kl);
      }
      return OkStatus();
    };
  G4_RETURN_IF_ERROR(ScorePerplexityChunks(
      *model, wp.windows, args.batch, score_rows,
      [&](int done) {
        if (output_rank) bar.Update(done, totals.acc.Perplexity());
      }));
  totals.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  G4_RETURN_IF_ERROR(deferred);
  if (!output_rank) return OkStatus();
  if (writer) G4_RETURN_IF_ERROR(writer->Finish());
  PrintReport(args, in, wp, totals, header, comm ? comm->size() : 1);
  return OkStatus();
}

int RunPerplexity(int argc, char** argv) {
  CLI::App app{"Perplexity over a text file, in windows scored on their second half (llama-perplexity's rule)",
               "g4 perplexity"};
  PerplexityArgs args;
  app.add_option("--model", args.model, "model directory or g4 pack artifact");
  app.add_option("--quant", args.quant, "weight format: bf16 (as shipped), q8, q4")
      ->check(CLI::IsMember({"bf16", "q8", "q4"}));
  app.add_option("--file", args.file, "text file (UTF-8)")->required();
  app.add_option("--ctx", args.ctx, "window size in tokens, prefix included");
  app.add_option("--stride", args.stride, "text tokens from one window's start to the next (0 = ctx - prefix: "
                 "windows side by side)");
  app.add_option("--batch", args.batch, "rows per forward call (prefill chunk)");
  app.add_flag("--chat", args.chat, "score the text as the model's turn after a user turn asking to continue");
  app.add_option("--save-logits", args.save_logits, "write the scored distributions (top-K + rest) to FILE");
  app.add_option("--save-top-k", args.top_k, "K of --save-logits")->check(CLI::Range(1, 1 << 20));
  app.add_option("--kl-base", args.kl_base, "compare with a run saved by --save-logits: KL, top-1, delta p");
  app.add_option("--threads", args.threads, "threads (0 = all cores)");
  app.add_option("--tp", args.tp, "tensor-parallel ranks: threads in this process, or one per process "
                 "under mpirun (default: 1, or mpirun's -np)");
  app.add_flag("--json", args.json, "print one JSON object");
  CLI11_PARSE(app, argc, argv);
  auto input = PrepareInput(args);
  if (!input.ok()) return IsOutputProcess() ? Fail("perplexity", input.status()) : 1;
  return RunTensorParallelCommand("perplexity", args.tp,
                                  [&](Communicator* comm) { return RunPerplexityRank(args, *input, comm); });
}

}  // namespace

G4_COMMAND("perplexity", "perplexity over a text file; KL divergence against a saved run", RunPerplexity);

}  // namespace g4::cli
