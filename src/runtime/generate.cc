#include "runtime/generate.h"

#include <algorithm>
#include <chrono>

namespace g4 {

Result<std::vector<float>> Prefill(Model& model, KvCache& cache, const std::vector<int>& ids,
                                   int chunk, bool all_rows, Activations& act) {
  const int vocab = model.plan().vocab;
  if (ids.empty()) return Status::Error("empty prompt");
  if (cache.n_past() + static_cast<int64_t>(ids.size()) > cache.max_context())
    return Status::Errorf("prompt of ", ids.size(), " tokens (after ", cache.n_past(),
                          " cached) does not fit the context of ", cache.max_context(), " tokens");
  chunk = std::max(1, std::min(chunk, cache.max_chunk()));
  std::vector<float> logits(static_cast<size_t>(all_rows ? ids.size() : 1) * vocab);
  std::vector<BatchRow> rows;
  size_t out_row = 0;
  for (size_t start = 0; start < ids.size(); start += chunk) {
    const size_t end = std::min(ids.size(), start + chunk);
    rows.clear();
    for (size_t i = start; i < end; ++i)
      rows.push_back(BatchRow{ids[i], cache.n_past() + static_cast<int64_t>(i - start), &cache,
                              all_rows || i + 1 == ids.size()});
    const size_t wanted = all_rows ? end - start : (end == ids.size() ? 1 : 0);
    G4_RETURN_IF_ERROR(model.Forward(rows, act, wanted ? logits.data() + out_row * vocab : nullptr));
    out_row += wanted;
  }
  return logits;
}

Result<GenerateResult> Generate(Model& model, KvCache& cache, const std::vector<int>& prompt,
                                const GenerateOptions& options,
                                const std::function<bool(int)>& on_token) {
  using Clock = std::chrono::steady_clock;
  GenerateResult result;
  result.prompt_tokens = static_cast<int>(prompt.size());
  const ModelPlan& plan = model.plan();
  Sampler sampler(options.sampling, static_cast<float>(plan.softcap), plan.vocab);
  Activations act;
  auto t0 = Clock::now();
  G4_ASSIGN_OR_RETURN(std::vector<float> logits,
                      Prefill(model, cache, prompt, options.prefill_chunk, false, act));
  result.prefill_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  auto t1 = Clock::now();
  result.finish_reason = "length";
  // Decoding allocates nothing per token: the token list and the one-row batch are made here.
  // (the context bounds how many tokens there can be: one per free position, plus the last).
  result.tokens.reserve(static_cast<size_t>(std::clamp<int64_t>(
      options.max_new_tokens, 0, cache.max_context() - cache.n_past() + 1)));
  std::vector<BatchRow> rows(1);
  for (int step = 0; step < options.max_new_tokens; ++step) {
    grammar::TokenConstraint* constraint = options.constraint;
    if (constraint && constraint->IsStuck())
      return Status::Error(constraint->StuckReason());
    int token = sampler.Sample(logits.data(), result.tokens, constraint ? constraint->Mask() : nullptr);
    // Tensor parallel: rank 0's choice is everyone's (an unseeded sampler differs per rank), and
    // so is its callback's decision to stop, or the other ranks would wait in the next Forward.
    Communicator* comm = model.communicator();
    if (comm) comm->Broadcast(&token, sizeof token, 0);
    if (constraint && !constraint->Accept(token))  // every allowed token had probability 0
      return Status::Error(kGrammarSuppressedError);
    result.tokens.push_back(token);
    const bool grammar_done = constraint && constraint->IsFinished();
    const bool is_stop = !options.ignore_eos && std::find(options.stop_ids.begin(),
                                                          options.stop_ids.end(), token) !=
                                                    options.stop_ids.end();
    // 0: cancelled, 1: go on, 2: the grammar is done (rank 0's grammar decides for all ranks).
    int keep_going = on_token ? on_token(token) : 1;
    if (keep_going && grammar_done) keep_going = 2;
    if (comm) comm->Broadcast(&keep_going, sizeof keep_going, 0);
    if (!keep_going) {
      result.finish_reason = "cancelled";
      break;
    }
    if (is_stop || keep_going == 2) {
      result.finish_reason = "stop";
      break;
    }
    if (step + 1 == options.max_new_tokens) break;
    if (cache.n_past() >= cache.max_context()) break;  // context full: "length"
    rows[0] = BatchRow{token, cache.n_past(), &cache, true};
    G4_RETURN_IF_ERROR(model.Forward(rows, act, logits.data()));
    ++result.target_passes;
  }
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return result;
}

}  // namespace g4
