// g4 bench --streams N ...: aggregate decode of N sequences batched into each forward pass (one
// row per sequence, as the server's continuous batching runs its slots), against the model's own
// prefill rate. With N rows a step reads the weights once for N tokens, so the aggregate grows
// with N until the products are bound by arithmetic: the rate prefill runs at. The two take
// turns (a prefill after every --window steps) so each ratio compares the same minute of this
// machine. Before timing, the largest N's first window is checked token for token against each
// of its sequences decoded alone.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/stopwatch.h"
#include "cli/bench.h"
#include "cli/cli_util.h"
#include "kernels/ops.h"
#include "model/kv_cache.h"
#include "model/random_prompt.h"

namespace g4::cli {
namespace {

struct Stream {
  std::unique_ptr<KvCache> cache;
  int token = 0;            // next token to feed
  std::vector<int> out;     // greedy tokens decoded so far
};

// Streams first..first+n-1, each with its own random prompt (seeded by its index) prefilled into
// its own cache.
Result<std::vector<Stream>> StartStreams(const BenchFlags& f, Model& model, Activations& act, int first, int n,
                                         int ctx) {
  const ModelPlan& plan = model.plan();
  std::vector<Stream> streams(n);
  std::vector<float> logits(plan.vocab);
  for (int s = 0; s < n; ++s) {
    Stream& st = streams[s];
    st.cache = std::make_unique<KvCache>(plan, ctx + f.decode_tokens + 1, f.chunk, KvTypeOf(f.kv_type));
    // Context tokens, then the first token to feed.
    std::vector<int> prompt = RandomPromptIds(ctx + 1, plan.vocab, 1000 + first + s);
    st.token = prompt.back();
    prompt.pop_back();
    if (ctx > 0) G4_RETURN_IF_ERROR(PrefillSeconds(model, *st.cache, act, logits, prompt, f.chunk).status());
  }
  return streams;
}

// One greedy step of every stream in one forward pass, a row each.
Status StepStreams(Model& model, std::vector<Stream>& streams, Activations& act, std::vector<float>& logits) {
  const int V = model.plan().vocab;
  std::vector<BatchRow> rows;
  rows.reserve(streams.size());
  for (Stream& s : streams) rows.push_back(BatchRow{s.token, s.cache->n_past(), s.cache.get(), true});
  logits.resize(rows.size() * static_cast<size_t>(V));
  G4_RETURN_IF_ERROR(model.Forward(rows, act, logits.data()));
  for (size_t r = 0; r < streams.size(); ++r) {
    streams[r].token = static_cast<int>(ArgMax(logits.data() + r * V, V));
    streams[r].out.push_back(streams[r].token);
  }
  return OkStatus();
}

// The first `tokens` greedy tokens of every stream batched, and each stream alone: how many agree.
// Batched products sum in another order than one row's, so a near tie may go the other way; a
// row sent to the wrong cache or position would disagree almost everywhere.
Result<nlohmann::json> CheckAgainstSingleStreams(const BenchFlags& f, Model& model, Activations& act, int n,
                                                 int ctx, int tokens) {
  std::vector<float> logits;
  G4_ASSIGN_OR_RETURN(std::vector<Stream> batched, StartStreams(f, model, act, 0, n, ctx));
  for (int t = 0; t < tokens; ++t) G4_RETURN_IF_ERROR(StepStreams(model, batched, act, logits));
  int matching = 0;
  for (int s = 0; s < n; ++s) {
    G4_ASSIGN_OR_RETURN(std::vector<Stream> alone, StartStreams(f, model, act, s, 1, ctx));
    for (int t = 0; t < tokens; ++t) G4_RETURN_IF_ERROR(StepStreams(model, alone, act, logits));
    for (int t = 0; t < tokens; ++t) matching += alone[0].out[t] == batched[s].out[t];
  }
  return nlohmann::json{
      {"streams", n}, {"tokens", n * tokens}, {"matching", matching}, {"first_stream_batched", batched[0].out}};
}

}  // namespace

Result<nlohmann::json> BenchStreams(const BenchFlags& f, Model& model, KvCache& prefill_cache,
                                    const std::vector<int>& ids) {
  const int ctx = f.contexts.front();
  const int prefill_len = *std::max_element(f.prefill_lengths.begin(), f.prefill_lengths.end());
  const std::vector<int> prefill_prompt(ids.begin(), ids.begin() + prefill_len);
  const int window = std::min(f.decode_window, f.decode_tokens);
  Activations act;
  std::vector<float> logits(model.plan().vocab);
  nlohmann::json j = {{"context", ctx}, {"prefill_tokens", prefill_len}, {"window", window},
                      {"by_streams", nlohmann::json::array()}};
  const int largest = *std::max_element(f.streams.begin(), f.streams.end());
  G4_ASSIGN_OR_RETURN(j["greedy_check"], CheckAgainstSingleStreams(f, model, act, largest, ctx, window));

  for (int n : f.streams) {
    G4_ASSIGN_OR_RETURN(std::vector<Stream> streams, StartStreams(f, model, act, 0, n, ctx));
    G4_RETURN_IF_ERROR(StepStreams(model, streams, act, logits));  // untimed: sizes the buffers for n rows
    std::vector<double> aggregate, prefill, ratios;
    double seconds = 0;
    int steps = 0;
    for (int done = 1; done < f.decode_tokens; done += window) {
      const int k = std::min(window, f.decode_tokens - done);
      const Stopwatch timer;
      for (int t = 0; t < k; ++t) G4_RETURN_IF_ERROR(StepStreams(model, streams, act, logits));
      const double s = timer.Seconds();
      seconds += s;
      steps += k;
      G4_ASSIGN_OR_RETURN(const double p, PrefillSeconds(model, prefill_cache, act, logits, prefill_prompt, f.chunk));
      aggregate.push_back(n * k / s);
      prefill.push_back(prefill_len / p);
      ratios.push_back(aggregate.back() / prefill.back());
    }
    const double tok_s = steps > 0 ? n * steps / seconds : 0;
    j["by_streams"].push_back({{"streams", n},
                               {"aggregate_tok_s", tok_s},
                               {"per_stream_tok_s", tok_s / n},
                               {"aggregate_over_prefill", Median(ratios)},
                               {"window_aggregate_tok_s", aggregate},
                               {"window_prefill_tok_s", prefill}});
    if (!f.json_out) std::fprintf(stderr, "%d streams: %.2f tok/s aggregate\n", n, tok_s);
  }
  return j;
}

void PrintStreamsTable(const nlohmann::json& j) {
  std::printf("  batched decode (one row per stream, after %d tokens of context; prefill pp%d in turns)\n",
              j["context"].get<int>(), j["prefill_tokens"].get<int>());
  for (const auto& row : j["by_streams"])
    std::printf("    %3d streams  %10.2f tok/s aggregate  %8.2f per stream  %6.1f%% of prefill\n",
                row["streams"].get<int>(),
                row["aggregate_tok_s"].get<double>(), row["per_stream_tok_s"].get<double>(),
                100 * row["aggregate_over_prefill"].get<double>());
  const auto& c = j["greedy_check"];
  std::printf("    greedy tokens of %d streams batched = each alone: %d of %d\n", c["streams"].get<int>(),
              c["matching"].get<int>(), c["tokens"].get<int>());
}

}  // namespace g4::cli
