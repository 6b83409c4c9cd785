// g4 bench: prefill / decode speed, time to first token, peak memory, and decode bandwidth
// against a STREAM-style measurement taken in the same run (the decode roofline of this machine).
// With --tp N (or under mpirun) the model runs over N tensor-parallel ranks and the time rank 0
// spends in collectives per token is reported too (g4 bench-tp compares several rank counts).
// This file: the flags and the timing loops; bench_memory.cc and bench_report.cc do the rest.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/stopwatch.h"
#include "base/thread_pool.h"
#include "cli/bench.h"
#include "cli/cli_util.h"
#include "cli/command.h"
#include "cli/tensor_parallel_command.h"
#include "kernels/ops.h"
#include "model/forward.h"
#include "model/loader.h"
#include "model/kv_cache.h"
#include "model/random_prompt.h"

namespace g4::cli {
namespace {

void AddBenchOptions(CLI::App& app, BenchFlags& f) {
  app.add_option("--model", f.model_dir, "model directory (Hugging Face layout)");
  app.add_option("--quant", f.quant, "weight format: bf16 (as shipped), q8, q4")
      ->check(CLI::IsMember({"bf16", "q8", "q4"}));
  app.add_option("--threads", f.threads, "threads per rank (0 = all cores, shared among the ranks)");
  app.add_option("--tp", f.tp,
                 "tensor-parallel ranks: threads in this process, or one per process under "
                 "mpirun (default: 1, or mpirun's -np); adds the time in collectives per token");
  app.add_option("--chunk", f.chunk, "prefill chunk (rows per forward call)");
  app.add_option("--kv-type", f.kv_type, kKvTypeHelp)->check(CLI::IsMember({"f32", "bf16", "q8"}));
  app.add_option("--decode-tokens", f.decode_tokens, "tokens per decode measurement");
  app.add_option(
      "--window", f.decode_window,
      "decode tokens per turn: the contexts take turns, and the weights are read alone "
      "after each turn (the paired bandwidth and context ratios are medians over turns)");
  app.add_option("--contexts", f.contexts, "decode measured after this many cached tokens");
  app.add_option("--prefill", f.prefill_lengths, "prompt lengths for prefill tok/s");
  app.add_option("--reps", f.reps, "repetitions (best is reported)");
  app.add_option("--mem-bw-mib", f.mem_bw_mib,
                 "MiB per array of the bandwidth measurement (default: 4x the last-level cache, "
                 "at least 512)");
  app.add_flag("!--no-warmup", f.warmup,
               "measure from the first forward pass after the load (default: one untimed "
               "prefill and two decode steps first, as llama-bench does)");
  app.add_flag("--json", f.json_out, "print one JSON object");
  app.add_option("--json-schema", f.json_schema,
                 "also decode with the output held to this JSON schema file (or json_object), "
                 "alternating with plain decode (with --spec, also speculative decode held to it), "
                 "and time the token masks");
  app.add_option("--streams", f.streams,
                 "also decode N sequences batched (one row each per forward pass), for each N "
                 "listed: aggregate tok/s against the prefill rate of the longest --prefill, in turns");
  AddSpecOptions(app, f.spec);
}

// Refuses values the loops cannot run with; lists each context once and clamps the chunk to 1.
Status CheckBenchFlags(BenchFlags& f) {
  if (f.prefill_lengths.empty() || f.contexts.empty() || f.decode_tokens < 1 || f.decode_window < 1 ||
      f.reps < 1 || f.tp < 0 || f.mem_bw_mib < 0)
    return Status::Error("--prefill and --contexts need a value, --decode-tokens, "
                         "--window and --reps >= 1, --tp >= 1, --mem-bw-mib >= 0");
  for (int v : f.prefill_lengths)
    if (v < 1) return Status::Error("--prefill lengths must be >= 1");
  for (int v : f.contexts)
    if (v < 0) return Status::Error("--contexts must be >= 0");
  // A context listed twice is measured once per round like the others (--reps adds samples).
  std::vector<int> unique_contexts;
  for (int v : f.contexts)
    if (std::find(unique_contexts.begin(), unique_contexts.end(), v) == unique_contexts.end())
      unique_contexts.push_back(v);
  f.contexts = unique_contexts;
  f.chunk = std::max(1, f.chunk);
  G4_RETURN_IF_ERROR(CheckSpecFlags(f.spec));
  if (f.spec.enabled() && f.tp > 1) return Status::Error("--spec is measured without --tp");
  for (int n : f.streams)
    if (n < 1) return Status::Error("--streams counts must be >= 1");
  if (!f.streams.empty() && f.tp > 1) return Status::Error("--streams is measured without --tp");
  if (!f.json_schema.empty()) {
    if (f.tp > 1) return Status::Error("--json-schema is measured without --tp");
    G4_ASSIGN_OR_RETURN(f.json_schema_gbnf, BenchSchemaGbnf(f.json_schema));
  }
  return OkStatus();
}

// What one rank's timing loops share: the model, its prefill cache (sized for the longest run),
// buffers, and the prompt ids (seeded random, the same on every rank).
struct BenchRun {
  Model& model;
  Communicator* comm;
  KvCache& cache;
  Activations& act;
  std::vector<float>& logits;
  const std::vector<int>& ids;
  // Collective time of this rank during one measurement, waiting for slower peers included.
  double CommSeconds() const { return comm ? comm->stats().seconds : 0.0; }
  int64_t CommCalls() const { return comm ? comm->stats().calls : int64_t{0}; }
  std::vector<int> Prompt(int n) const { return std::vector<int>(ids.begin(), ids.begin() + n); }
};

// Greedy decode of `n` tokens after the cache's current contents, from `token` on (left at the
// next token to feed); argmax of the raw logits (the softcap is monotonic, so greedy never needs
// it). Returns the seconds taken.
Result<double> DecodeSeconds(Model& model, KvCache& cache, Activations& act,
                             std::vector<float>& logits, int& token, int n) {
  std::vector<BatchRow> rows(1);
  const Stopwatch timer;
  for (int i = 0; i < n; ++i) {
    rows[0] = BatchRow{token, cache.n_past(), &cache, true};
    G4_RETURN_IF_ERROR(model.Forward(rows, act, logits.data()));
    token = static_cast<int>(ArgMax(logits.data(), model.plan().vocab));
  }
  return timer.Seconds();
}

}  // namespace

Result<double> PrefillSeconds(Model& model, KvCache& cache, Activations& act,
                              std::vector<float>& logits, const std::vector<int>& ids, int chunk) {
  cache.Reset();
  std::vector<BatchRow> rows;
  const Stopwatch timer;
  for (size_t start = 0; start < ids.size(); start += chunk) {
    const size_t end = std::min(ids.size(), start + chunk);
    rows.clear();
    for (size_t i = start; i < end; ++i)
      rows.push_back(BatchRow{ids[i], static_cast<int64_t>(i), &cache, i + 1 == ids.size()});
    G4_RETURN_IF_ERROR(model.Forward(rows, act, end == ids.size() ? logits.data() : nullptr));
  }
  ArgMax(logits.data(), model.plan().vocab);
  return timer.Seconds();
}

namespace {

// The first pass after a load pays for first touches: the activation buffers' and the cache's
// pages, and weights and tables not yet in any cache or TLB. Measured here: E2B q4 pp512 109-137
// tok/s cold against 149-170 warm in the same minutes. That pass is taken untimed.
Status WarmUp(const BenchFlags& f, const BenchRun& run) {
  const int longest = *std::max_element(f.prefill_lengths.begin(), f.prefill_lengths.end());
  G4_RETURN_IF_ERROR(
      PrefillSeconds(run.model, run.cache, run.act, run.logits, run.Prompt(longest), f.chunk).status());
  int token = run.ids[longest];
  return DecodeSeconds(run.model, run.cache, run.act, run.logits, token, 2).status();
}

// Prefill at each length, the best of --reps; TTFT = prefill of the first prompt to its first token.
Result<PrefillTimes> TimePrefill(const BenchFlags& f, const BenchRun& run) {
  PrefillTimes out;
  for (int len : f.prefill_lengths) {
    double best = 1e30, best_comm = 0;
    for (int r = 0; r < f.reps; ++r) {
      const double c0 = run.CommSeconds();
      G4_ASSIGN_OR_RETURN(double s,
                          PrefillSeconds(run.model, run.cache, run.act, run.logits, run.Prompt(len), f.chunk));
      if (s < best) {
        best = s;
        best_comm = run.CommSeconds() - c0;
      }
    }
    out.tok_s[std::to_string(len)] = len / best;
    out.comm_ms_per_token[std::to_string(len)] = best_comm * 1e3 / len;
    if (len == f.prefill_lengths.front()) out.ttft_s = best;
    if (!f.json_out && IsOutputRank(run.comm)) std::fprintf(stderr, "prefill %d: %.2f tok/s\n", len, len / best);
  }
  return out;
}

// Decode at each context, the best of --reps. Each context decodes in its own cache (the largest
// reuses the prefill cache), so that the contexts can take turns: every `window` tokens the next
// context decodes its next window, and after each window the same weight bytes are streamed once
// with nothing else to do (one rank only: under --tp the ranks would compete for the bus). This
// VM's bandwidth drifts by 1.5x within minutes; windows taken moments apart see the same machine,
// so the paired ratios (decode against the read right after it, ctx C against ctx 0 in the same
// turn) hold where figures from separate minutes do not. The turn order reverses every window
// (ABBA), so a steady drift favours no context.
Result<DecodeTimes> TimeDecode(const BenchFlags& f, const BenchRun& run) {
  const std::vector<int>& contexts = f.contexts;
  DecodeTimes out;
  const auto decode_spans = DecodeMatrices(run.model);
  const int window = std::min(f.decode_window, f.decode_tokens);
  out.window = window;
  std::vector<KvCache*> stream_cache(contexts.size());
  std::vector<std::unique_ptr<KvCache>> owned_caches;
  const int largest = static_cast<int>(std::max_element(contexts.begin(), contexts.end()) - contexts.begin());
  out.kv_bytes = run.cache.bytes();
  for (size_t ci = 0; ci < contexts.size(); ++ci) {
    if (static_cast<int>(ci) == largest) {
      stream_cache[ci] = &run.cache;
      continue;
    }
    owned_caches.push_back(std::make_unique<KvCache>(run.model.plan(), contexts[ci] + f.decode_tokens + 1, f.chunk,
                                                        KvTypeOf(f.kv_type)));
    stream_cache[ci] = owned_caches.back().get();
    out.kv_bytes += owned_caches.back()->bytes();
  }
  out.window_tok_s.resize(contexts.size());
  out.window_read_gb_s.resize(contexts.size());
  std::vector<double> best(contexts.size(), 0.0), best_comm(contexts.size(), 0.0),
      best_fill(contexts.size(), 0.0);
  for (int r = 0; r < f.reps; ++r) {
    std::vector<int> token(contexts.size());
    std::vector<double> seconds(contexts.size(), 0.0), comm_s(contexts.size(), 0.0);
    for (size_t ci = 0; ci < contexts.size(); ++ci) {
      const int ctx = contexts[ci];
      stream_cache[ci]->Reset();
      if (ctx > 0) {
        G4_ASSIGN_OR_RETURN(double s, PrefillSeconds(run.model, *stream_cache[ci], run.act, run.logits,
                                                     run.Prompt(ctx), f.chunk));
        best_fill[ci] = std::max(best_fill[ci], ctx / s);
      }
      token[ci] = run.ids[ctx];
    }
    const int64_t calls0 = run.CommCalls();
    for (int done = 0, w = 0; done < f.decode_tokens; done += window, ++w) {
      const int n = std::min(window, f.decode_tokens - done);
      for (size_t k = 0; k < contexts.size(); ++k) {
        const size_t ci = w % 2 ? contexts.size() - 1 - k : k;
        const double c0 = run.CommSeconds();
        G4_ASSIGN_OR_RETURN(double s,
                            DecodeSeconds(run.model, *stream_cache[ci], run.act, run.logits, token[ci], n));
        comm_s[ci] += run.CommSeconds() - c0;
        seconds[ci] += s;
        out.window_tok_s[ci].push_back(n / s);
        if (!run.comm) out.window_read_gb_s[ci].push_back(ReadGbPerSecond(decode_spans, run.model.pool(), 1));
      }
    }
    out.collectives_per_token =
        static_cast<double>(run.CommCalls() - calls0) / (f.decode_tokens * contexts.size());
    for (size_t ci = 0; ci < contexts.size(); ++ci) {
      const double tps = f.decode_tokens / seconds[ci];
      if (tps > best[ci]) {
        best[ci] = tps;
        best_comm[ci] = comm_s[ci];
      }
    }
  }
  for (size_t ci = 0; ci < contexts.size(); ++ci) {
    out.tok_s[std::to_string(contexts[ci])] = best[ci];
    out.comm_ms_per_token[std::to_string(contexts[ci])] = best_comm[ci] * 1e3 / f.decode_tokens;
    if (contexts[ci] > 0) out.fill_tok_s[std::to_string(contexts[ci])] = best_fill[ci];
    if (!f.json_out && IsOutputRank(run.comm))
      std::fprintf(stderr, "decode at ctx %d: %.2f tok/s\n", contexts[ci], best[ci]);
  }
  return out;
}

// One rank's whole measurement on its loaded model; rank 0 reports.
Status BenchModel(const BenchFlags& f, Model& model, Communicator* comm, BenchFacts facts,
                  const ModelOptions& options) {
  const ModelPlan& plan = model.plan();
  int max_ctx = 0;
  for (int c : f.contexts) max_ctx = std::max(max_ctx, c);
  for (int p : f.prefill_lengths) max_ctx = std::max(max_ctx, p);
  max_ctx += f.decode_tokens + 1;
  KvCache cache(plan, max_ctx, f.chunk, KvTypeOf(f.kv_type));
  Activations act;
  std::vector<float> logits(plan.vocab);
  const auto ids = RandomPromptIds(max_ctx, plan.vocab, 1);
  const BenchRun run{model, comm, cache, act, logits, ids};

  // A packed artifact holds one format, whatever --quant says: report the one it holds.
  facts.held_quant = !model.weights().layers.empty() && !model.weights().layers[0].down_proj.empty()
                         ? WeightTypeName(model.weights().layers[0].down_proj.type)
                         : f.quant;
  facts.tensor_parallel = comm != nullptr;
  if (f.warmup) G4_RETURN_IF_ERROR(WarmUp(f, run));
  G4_ASSIGN_OR_RETURN(const PrefillTimes prefill, TimePrefill(f, run));
  G4_ASSIGN_OR_RETURN(const DecodeTimes decode, TimeDecode(f, run));
  nlohmann::json spec;
  SpecSetup setup;
  if (f.spec.enabled()) {
    G4_ASSIGN_OR_RETURN(setup, MakeSpecSetup(f.spec, model, SamplingParams{}, max_ctx, options, comm));
    G4_ASSIGN_OR_RETURN(spec, BenchSpeculative(f, model, setup, ids));
  }
  nlohmann::json streams;
  if (!f.streams.empty()) {
    G4_ASSIGN_OR_RETURN(streams, BenchStreams(f, model, cache, ids));
  }
  nlohmann::json constrained;
  if (!f.json_schema.empty()) {
    G4_ASSIGN_OR_RETURN(constrained, BenchSchema(f, model, setup.drafter ? &setup : nullptr, ids));
  }
  if (!IsOutputRank(comm)) return OkStatus();
  nlohmann::json j = BenchJson(f, model, comm, facts, prefill, decode);
  if (f.spec.enabled()) j["speculative"] = spec;
  if (!f.json_schema.empty()) j["constrained"] = constrained;
  if (!f.streams.empty()) j["streams"] = streams;
  if (f.json_out) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    PrintBenchTable(f, facts, j);
    if (f.spec.enabled()) PrintSpecTable(spec);
    if (!f.json_schema.empty()) PrintSchemaTable(constrained);
    if (!f.streams.empty()) PrintStreamsTable(streams);
  }
  return OkStatus();
}

int RunBench(int argc, char** argv) {
  CLI::App app{"Measure prefill and decode speed, memory and bandwidth", "g4 bench"};
  BenchFlags f;
  f.model_dir = DefaultModelPath();
  AddBenchOptions(app, f);
  CLI11_PARSE(app, argc, argv);
  if (Status st = CheckBenchFlags(f); !st.ok()) return Fail("bench", st);

  ModelOptions options;
  options.threads = f.threads;
  ParseWeightType(f.quant, &options.load.quant);
  // Under mpirun only rank 0 measures the machine and reports; the others run the same steps.
  BenchFacts facts;
  if (IsOutputProcess()) {
    ThreadPool pool(f.threads);
    facts.bandwidth = MeasureBandwidth(pool, f.mem_bw_mib);
  }
  return RunTensorParallelCommand("bench", f.tp, [&](Communicator* comm) -> Status {
    const Stopwatch load_timer;
    const std::string& model_dir = f.model_dir;
    G4_ASSIGN_OR_RETURN(std::unique_ptr<Model> loaded, LoadModel(model_dir, options.OnRanks(comm)));
    BenchFacts rank_facts = facts;
    rank_facts.load_s = load_timer.Seconds();
    return BenchModel(f, *loaded, comm, rank_facts, options);
  });
}

}  // namespace

G4_COMMAND("bench", "measure prefill/decode speed, memory and bandwidth", RunBench);

}  // namespace g4::cli
