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
  int ctx = 512, batch = 128, stride = 0, threads = 0, top_k = 256;
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

Status RunPerplexityWith(const PerplexityArgs& args) {
  if (args.ctx < 2) return Status::Errorf("--ctx must be >= 2 (got ", args.ctx, ")");
  G4_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, LoadModelTokenizer(args.model));
  G4_ASSIGN_OR_RETURN(std::string text, ReadTextFile(args.file));
  const std::vector<int> text_ids = tokenizer->Encode(text);
  ModelOptions options;
  options.threads = args.threads;
  ParseWeightType(args.quant, &options.load.quant);
  G4_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, LoadModel(args.model, options));
  const ModelPlan& plan = model->plan();
  if (plan.config.max_position_embeddings > 0 && args.ctx > plan.config.max_position_embeddings)
    return Status::Errorf("--ctx ", args.ctx, " exceeds the model's max_position_embeddings ",
                          plan.config.max_position_embeddings);

  G4_ASSIGN_OR_RETURN(std::vector<int> prefix, WindowPrefix(args, *tokenizer));
  G4_ASSIGN_OR_RETURN(std::vector<PerplexityWindow> windows,
                      PlanPerplexityWindows(prefix, text_ids, args.ctx, args.stride));
  const int stride = args.stride ? args.stride : args.ctx - static_cast<int>(prefix.size());
  int64_t scored = 0;
  for (const auto& w : windows) scored += args.ctx - w.first_scored;

  LogitsFileHeader header;
  header.k = static_cast<uint32_t>(std::min(args.top_k, plan.vocab));
  header.vocab = static_cast<uint32_t>(plan.vocab);
  header.ctx = static_cast<uint32_t>(args.ctx);
  header.stride = static_cast<uint32_t>(stride);
  header.flags = args.chat ? kLogitsFileChat : 0;
  header.positions = static_cast<uint64_t>(scored);
  header.tokens_hash = HashPerplexityWindows(windows);
  LogitsFile base;
  if (!args.kl_base.empty()) {
    G4_ASSIGN_OR_RETURN(base, ReadLogitsFile(args.kl_base));
    G4_RETURN_IF_ERROR(CheckBaseMatches(base.header, header, args.kl_base));
  }
  std::unique_ptr<LogitsFileWriter> writer;
  if (!args.save_logits.empty()) {
    G4_ASSIGN_OR_RETURN(writer, LogitsFileWriter::Create(args.save_logits, header));
  }

  if (!args.json)
    std::printf("g4 perplexity: %s (%s), %s: %zu tokens, %zu windows of %d (stride %d, %zu prefix), %lld scored\n",
                args.model.c_str(), args.quant.c_str(), args.file.c_str(), text_ids.size(), windows.size(),
                args.ctx, stride, prefix.size(), static_cast<long long>(scored));
  std::fflush(stdout);
  PerplexityAccumulator acc;
  std::vector<KlSample> kl_samples;
  std::vector<double> logprobs;
  size_t position = 0;
  ProgressBar bar(static_cast<int>(windows.size()));
  const auto t0 = std::chrono::steady_clock::now();
  G4_RETURN_IF_ERROR(ScorePerplexityWindows(
      *model, windows, args.batch,
      [&](const ScoredRow& row) -> Status {
        LogSoftmax(row.logits, plan.vocab, logprobs);
        acc.Add(logprobs[row.target]);
        if (writer) G4_RETURN_IF_ERROR(writer->Append(SummarizeDistribution(logprobs, row.target, header.k)));
        if (!base.records.empty()) {
          const TopKRecord& b = base.records[position];
          if (b.target != row.target)
            return Status::Errorf("--kl-base ", args.kl_base, ": position ", position, " scores token ", b.target,
                                  ", this run token ", row.target);
          kl_samples.push_back(CompareWithBase(b, logprobs));
        }
        ++position;
        return OkStatus();
      },
      [&](int done) { bar.Update(done, acc.Perplexity()); }));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (writer) G4_RETURN_IF_ERROR(writer->Finish());

  nlohmann::json out = {{"model", args.model}, {"quant", args.quant}, {"file", args.file},
                        {"tokens", text_ids.size()}, {"windows", windows.size()}, {"ctx", args.ctx},
                        {"stride", stride}, {"prefix_tokens", prefix.size()}, {"chat", args.chat},
                        {"scored", scored}, {"ppl", acc.Perplexity()}, {"ppl_error", acc.PerplexityError()},
                        {"mean_nll", acc.MeanNll()}, {"seconds", seconds}};
  KlSummary kl;
  if (!args.kl_base.empty()) {
    kl = SummarizeKl(kl_samples);
    out["kl"] = KlJson(kl);
  }
  if (args.json) {
    std::printf("%s\n", out.dump().c_str());
    return OkStatus();
  }
  std::printf("PPL = %.4f +/- %.4f  (mean NLL %.5f nats over %lld tokens, %.1f s, %.0f tokens/s)\n",
              acc.Perplexity(), acc.PerplexityError(), acc.MeanNll(), static_cast<long long>(scored), seconds,
              windows.size() * args.ctx / std::max(seconds, 1e-9));
  if (!args.kl_base.empty()) {
    std::printf("vs %s: PPL(base) %.4f, ln(PPL/PPL(base)) %+.5f\n", args.kl_base.c_str(), kl.base_ppl,
                kl.mean_log_ppl_ratio);
    std::printf("KL divergence (nats): mean %.6f, median %.6f, p99 %.6f, max %.6f\n", kl.mean_kl, kl.median_kl,
                kl.p99_kl, kl.max_kl);
    std::printf("same top-1 token: %.2f%%   delta p(target): mean %+.5f, rms %.5f\n", 100 * kl.same_top1, kl.mean_dp,
                kl.rms_dp);
  }
  if (writer)
    std::printf("saved %lld positions (top-%u, %zu bytes each) to %s\n", static_cast<long long>(scored), header.k,
                LogitsRecordBytes(header.k), args.save_logits.c_str());
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
  app.add_flag("--json", args.json, "print one JSON object");
  CLI11_PARSE(app, argc, argv);
  const Status status = RunPerplexityWith(args);
  return status.ok() ? 0 : Fail("perplexity", status);
}

}  // namespace

G4_COMMAND("perplexity", "perplexity over a text file; KL divergence against a saved run", RunPerplexity);

}  // namespace g4::cli
