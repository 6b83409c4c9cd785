// g4 bench: prefill / decode speed, time to first token, peak memory, and decode bandwidth
// against a STREAM-style measurement taken in the same run (the decode roofline of this machine).
// With --tp N (or under mpirun) the model runs over N tensor-parallel ranks and the time rank 0
// spends in collectives per token is reported too (g4 bench-tp compares several rank counts).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "cli/cli_util.h"
#include "cli/command.h"
#include "kernels/cpu_kernels.h"
#include "kernels/ops.h"
#include "model/forward.h"
#include "parallel/tensor_parallel.h"
#include "runtime/kv_cache.h"

namespace g4::cli {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// VmHWM: the process's peak resident set so far.
int64_t PeakRssBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

// Streams [p, p + n) once, 64 bytes per step in four 16-byte vectors, asking for the bytes 4 KiB
// ahead as the decode kernels do (on these VMs the hardware prefetcher alone leaves a core well
// under its bandwidth). Only XORs: one core is never compute-bound here, so this is what the
// memory gives, not what a loop can add. Returns a fold of the bytes so the loads stay.
uint64_t StreamRead(const uint8_t* p, size_t n) {
  using V2 = uint64_t __attribute__((vector_size(16)));
  V2 a0{}, a1{}, a2{}, a3{};
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __builtin_prefetch(p + i + 4096, 0, 3);
    V2 v[4];
    std::memcpy(v, p + i, 64);
    a0 ^= v[0], a1 ^= v[1], a2 ^= v[2], a3 ^= v[3];
  }
  const V2 a = a0 ^ a1 ^ a2 ^ a3;
  uint64_t fold = a[0] ^ a[1];
  for (; i < n; ++i) fold ^= p[i];
  return fold;
}

// Byte ranges read in pieces of the decode task size (kMaxDecodeTaskBytes), all in one
// ParallelFor over `pool`: GB/s of the fastest of `passes` passes.
double ReadGbPerSecond(const std::vector<std::pair<const uint8_t*, size_t>>& spans,
                       ThreadPool& pool, int passes) {
  constexpr size_t kPiece = kMaxDecodeTaskBytes;
  std::vector<std::pair<const uint8_t*, size_t>> pieces;
  size_t total = 0;
  for (const auto& [p, n] : spans) {
    for (size_t off = 0; off < n; off += kPiece)
      pieces.push_back({p + off, std::min(kPiece, n - off)});
    total += n;
  }
  std::vector<uint64_t> folds(pieces.size());
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const auto t0 = Clock::now();
    pool.ParallelFor(static_cast<int64_t>(pieces.size()), [&](int64_t t, int) {
      folds[t] = StreamRead(pieces[t].first, pieces[t].second);
    });
    best = std::max(best, total / Seconds(t0) / 1e9);
  }
  uint64_t all = 0;
  for (uint64_t f : folds) all ^= f;
  if (all == 0x1234567) std::printf(" ");  // keep the reads alive
  return best;
}

struct Bandwidth {
  double triad_gb_s = 0;  // a = b + s c, 3 arrays counted (STREAM's convention)
  double read_gb_s = 0;   // one array streamed: the access pattern of decode
};

// STREAM's rule: each array at least 4x the last-level cache. These VMs report a 300 MiB L3, and
// with the 128 MiB arrays used before, the read figure came partly from the cache (46 GB/s against
// 33 for streaming the model's own weights in the same run). Default: 4x the L3, at least 512 MiB
// and at most 1/12 of RAM per array; `array_mib` > 0 overrides it (tests use small arrays). Best
// of several passes, with the same pool and thread count as the model. Taken before the model
// loads; the arrays are freed and the peak-RSS mark reset afterwards, so they do not count in
// peak RSS.
Bandwidth MeasureBandwidth(ThreadPool& pool, int array_mib) {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), ram_pages = sysconf(_SC_PHYS_PAGES),
             page = sysconf(_SC_PAGESIZE);
  size_t array_bytes =
      std::max<size_t>(size_t{512} << 20, l3 > 0 ? 4 * static_cast<size_t>(l3) : 0);
  if (ram_pages > 0 && page > 0)
    array_bytes = std::min(array_bytes, static_cast<size_t>(ram_pages) * page / 12);
  if (array_mib > 0) array_bytes = static_cast<size_t>(array_mib) << 20;
  const int64_t tasks = 256;
  const size_t per = std::max<size_t>(1, array_bytes / sizeof(float) / tasks);
  const size_t n = per * tasks;  // floats per array
  Bandwidth bw;
  {
    std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n, 0.5f);
    for (int rep = 0; rep < 4; ++rep) {
      auto t0 = Clock::now();
      pool.ParallelFor(tasks, [&](int64_t t, int) {
        float* pa = a.data() + t * per;
        const float *pb = b.data() + t * per, *pc = c.data() + t * per;
        for (size_t i = 0; i < per; ++i) pa[i] = pb[i] + 0.5f * pc[i];
      });
      bw.triad_gb_s = std::max(bw.triad_gb_s, 3.0 * n * sizeof(float) / Seconds(t0) / 1e9);
    }
    bw.read_gb_s =
        ReadGbPerSecond({{reinterpret_cast<const uint8_t*>(b.data()), n * sizeof(float)}}, pool, 4);
  }
  // "5" resets VmHWM to the current RSS (Linux >= 4.0); if refused, peak RSS includes the arrays.
  std::ofstream("/proc/self/clear_refs") << "5";
  return bw;
}

// The weight matrices one decoded token multiplies by (the tied LM head in full).
std::vector<std::pair<const uint8_t*, size_t>> DecodeMatrices(const Model& model) {
  std::vector<std::pair<const uint8_t*, size_t>> spans;
  for (const WeightMatrix* m : model.weights().Matrices())
    if (!m->empty()) spans.push_back({static_cast<const uint8_t*>(m->data), m->bytes});
  return spans;
}

// Weight bytes one decoded token reads: those matrices, one embedding row and one PLE row.
int64_t WeightBytesPerToken(const Model& model) {
  const ModelWeights& w = model.weights();
  const ModelPlan& plan = model.plan();
  int64_t bytes = static_cast<int64_t>(w.embed.bytes) / plan.vocab;
  for (const auto& span : DecodeMatrices(model)) bytes += static_cast<int64_t>(span.second);
  if (plan.ple_dim > 0)
    bytes += static_cast<int64_t>(plan.n_layers()) * plan.ple_dim *
             static_cast<int64_t>(DTypeSize(w.ple_dtype));
  return bytes;
}

std::vector<int> RandomIds(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> ids{2};
  while (static_cast<int>(ids.size()) < n)
    ids.push_back(static_cast<int>(rng() % (vocab - 10)) + 10);
  return ids;
}

// Greedy decode of `n` tokens after the cache's current contents, from `token` on (left at the
// next token to feed); argmax of the raw logits (the softcap is monotonic, so greedy never needs
// it). Returns the seconds taken.
Result<double> DecodeSeconds(Model& model, KvCache& cache, Activations& act,
                             std::vector<float>& logits, int& token, int n) {
  std::vector<BatchRow> rows(1);
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    rows[0] = BatchRow{token, cache.n_past(), &cache, true};
    G4_RETURN_IF_ERROR(model.Forward(rows, act, logits.data()));
    token = static_cast<int>(ArgMax(logits.data(), model.plan().vocab));
  }
  return Seconds(t0);
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// Prefill of `ids` into an empty cache in chunks; returns seconds until the last row's logits.
Result<double> PrefillSeconds(Model& model, KvCache& cache, Activations& act,
                              std::vector<float>& logits, const std::vector<int>& ids, int chunk) {
  cache.Reset();
  std::vector<BatchRow> rows;
  auto t0 = Clock::now();
  for (size_t start = 0; start < ids.size(); start += chunk) {
    const size_t end = std::min(ids.size(), start + chunk);
    rows.clear();
    for (size_t i = start; i < end; ++i)
      rows.push_back(BatchRow{ids[i], static_cast<int64_t>(i), &cache, i + 1 == ids.size()});
    G4_RETURN_IF_ERROR(model.Forward(rows, act, end == ids.size() ? logits.data() : nullptr));
  }
  ArgMax(logits.data(), model.plan().vocab);
  return Seconds(t0);
}

int RunBench(int argc, char** argv) {
  CLI::App app{"Measure prefill and decode speed, memory and bandwidth", "g4 bench"};
  std::string model_dir = DefaultModelPath(), quant = "bf16";
  int threads = 0, chunk = 512, decode_tokens = 128, decode_window = 16, reps = 1, tp = 0,
      mem_bw_mib = 0;
  std::vector<int> contexts{0, 512, 2048};
  std::vector<int> prefill_lengths{128, 512};
  bool json_out = false, warmup = true;
  app.add_option("--model", model_dir, "model directory (Hugging Face layout)");
  app.add_option("--quant", quant, "weight format: bf16 (as shipped), q8, q4")
      ->check(CLI::IsMember({"bf16", "q8", "q4"}));
  app.add_option("--threads", threads, "threads per rank (0 = all cores, shared among the ranks)");
  app.add_option("--tp", tp,
                 "tensor-parallel ranks: threads in this process, or one per process under "
                 "mpirun (default: 1, or mpirun's -np); adds the time in collectives per token");
  app.add_option("--chunk", chunk, "prefill chunk (rows per forward call)");
  app.add_option("--decode-tokens", decode_tokens, "tokens per decode measurement");
  app.add_option(
      "--window", decode_window,
      "decode tokens per turn: the contexts take turns, and the weights are read alone "
      "after each turn (the paired bandwidth and context ratios are medians over turns)");
  app.add_option("--contexts", contexts, "decode measured after this many cached tokens");
  app.add_option("--prefill", prefill_lengths, "prompt lengths for prefill tok/s");
  app.add_option("--reps", reps, "repetitions (best is reported)");
  app.add_option("--mem-bw-mib", mem_bw_mib,
                 "MiB per array of the bandwidth measurement (default: 4x the last-level cache, "
                 "at least 512)");
  app.add_flag("!--no-warmup", warmup,
               "measure from the first forward pass after the load (default: one untimed "
               "prefill and two decode steps first, as llama-bench does)");
  app.add_flag("--json", json_out, "print one JSON object");
  CLI11_PARSE(app, argc, argv);
  if (prefill_lengths.empty() || contexts.empty() || decode_tokens < 1 || decode_window < 1 ||
      reps < 1 || tp < 0 || mem_bw_mib < 0)
    return Fail("bench", Status::Error("--prefill and --contexts need a value, --decode-tokens, "
                                       "--window and --reps >= 1, --tp >= 1, --mem-bw-mib >= 0"));
  for (int v : prefill_lengths)
    if (v < 1) return Fail("bench", Status::Error("--prefill lengths must be >= 1"));
  for (int v : contexts)
    if (v < 0) return Fail("bench", Status::Error("--contexts must be >= 0"));
  // A context listed twice is measured once per round like the others (--reps adds samples).
  std::vector<int> unique_contexts;
  for (int v : contexts)
    if (std::find(unique_contexts.begin(), unique_contexts.end(), v) == unique_contexts.end())
      unique_contexts.push_back(v);
  contexts = unique_contexts;

  ModelOptions options;
  options.threads = threads;
  ParseWeightType(quant, &options.load.quant);
  // Under mpirun only rank 0 measures the machine and reports; the others run the same steps.
  const bool output_process = IsOutputProcess();
  Bandwidth bw;
  if (output_process) {
    ThreadPool pool(threads);
    bw = MeasureBandwidth(pool, mem_bw_mib);
  }
  Status st = RunTensorParallel(tp, [&](Communicator* comm) -> Status {
    auto t_load = Clock::now();
    G4_ASSIGN_OR_RETURN(std::unique_ptr<Model> loaded, LoadRankModel(model_dir, options, comm));
    const double load_s = Seconds(t_load);
    Model& model = *loaded;
    const ModelPlan& plan = model.plan();
    // Collective time of this rank during one measurement, waiting for slower peers included.
    auto comm_seconds = [&] { return comm ? comm->stats().seconds : 0.0; };
    auto comm_calls = [&] { return comm ? comm->stats().calls : int64_t{0}; };
    int max_ctx = 0;
    for (int c : contexts) max_ctx = std::max(max_ctx, c);
    for (int p : prefill_lengths) max_ctx = std::max(max_ctx, p);
    max_ctx += decode_tokens + 1;
    chunk = std::max(1, chunk);
    KvCache cache(plan, max_ctx, chunk);
    Activations act;
    std::vector<float> logits(plan.vocab);
    const auto ids = RandomIds(max_ctx, plan.vocab, 1);

    // A packed artifact holds one format, whatever --quant says: report the one it holds.
    const std::string held =
        !model.weights().layers.empty() && !model.weights().layers[0].down_proj.empty()
            ? WeightTypeName(model.weights().layers[0].down_proj.type)
            : quant;
    // The first pass after a load pays for first touches: the activation buffers' and the
    // cache's pages, and weights and tables not yet in any cache or TLB. Measured here: E2B q4
    // pp512 109-137 tok/s cold against 149-170 warm in the same minutes. Take that pass untimed.
    if (warmup) {
      const int longest = *std::max_element(prefill_lengths.begin(), prefill_lengths.end());
      G4_RETURN_IF_ERROR(PrefillSeconds(model, cache, act, logits,
                                        std::vector<int>(ids.begin(), ids.begin() + longest), chunk)
                             .status());
      int token = ids[longest];
      G4_RETURN_IF_ERROR(DecodeSeconds(model, cache, act, logits, token, 2).status());
    }
    nlohmann::json j;
    j["model"] = model_dir;
    j["warmup"] = warmup;
    j["quant"] = held;
    j["threads"] = model.pool().size();
    j["tp"] = comm ? comm->size() : 1;
    j["isa"] = ActiveKernels().name;
    j["load_s"] = load_s;
    // Prefill at each length; TTFT = prefill of the first (shortest) prompt to its first token.
    nlohmann::json prefill = nlohmann::json::object(), prefill_comm = nlohmann::json::object();
    for (int len : prefill_lengths) {
      double best = 1e30, best_comm = 0;
      for (int r = 0; r < reps; ++r) {
        const double c0 = comm_seconds();
        G4_ASSIGN_OR_RETURN(
            double s, PrefillSeconds(model, cache, act, logits,
                                     std::vector<int>(ids.begin(), ids.begin() + len), chunk));
        if (s < best) {
          best = s;
          best_comm = comm_seconds() - c0;
        }
      }
      prefill[std::to_string(len)] = len / best;
      prefill_comm[std::to_string(len)] = best_comm * 1e3 / len;
      if (len == prefill_lengths.front()) j["ttft_s"] = best;
      if (!json_out && IsOutputRank(comm))
        std::fprintf(stderr, "prefill %d: %.2f tok/s\n", len, len / best);
    }
    j["prefill_tok_s_by_len"] = prefill;
    j["prefill_tok_s"] =
        prefill.contains("512") ? prefill["512"] : prefill[std::to_string(prefill_lengths.back())];
    nlohmann::json decode = nlohmann::json::object(), decode_comm = nlohmann::json::object();
    double collectives_per_token = 0;
    // Each context decodes in its own cache (the largest reuses the prefill cache), so that the
    // contexts can take turns: every `window` tokens the next context decodes its next window,
    // and after each window the same weight bytes are streamed once with nothing else to do (one
    // rank only: under --tp the ranks would compete for the bus). This VM's bandwidth drifts by
    // 1.5x within minutes; windows taken moments apart see the same machine, so the paired ratios
    // (decode against the read right after it, ctx C against ctx 0 in the same turn) hold where
    // figures from separate minutes do not. The turn order reverses every window (ABBA), so a
    // steady drift favours no context.
    const auto decode_spans = DecodeMatrices(model);
    const int window = std::min(decode_window, decode_tokens);
    std::vector<KvCache*> stream_cache(contexts.size());
    std::vector<std::unique_ptr<KvCache>> owned_caches;
    const int largest =
        static_cast<int>(std::max_element(contexts.begin(), contexts.end()) - contexts.begin());
    size_t kv_bytes = cache.bytes();
    for (size_t ci = 0; ci < contexts.size(); ++ci) {
      if (static_cast<int>(ci) == largest) {
        stream_cache[ci] = &cache;
        continue;
      }
      owned_caches.push_back(
          std::make_unique<KvCache>(plan, contexts[ci] + decode_tokens + 1, chunk));
      stream_cache[ci] = owned_caches.back().get();
      kv_bytes += owned_caches.back()->bytes();
    }
    // Per context: each window's tok/s and the weights-alone read right after it (GB/s).
    std::vector<std::vector<double>> window_tok_s(contexts.size()),
        window_read_gb_s(contexts.size());
    std::vector<double> best(contexts.size(), 0.0), best_comm(contexts.size(), 0.0);
    for (int r = 0; r < reps; ++r) {
      std::vector<int> token(contexts.size());
      std::vector<double> seconds(contexts.size(), 0.0), comm_s(contexts.size(), 0.0);
      for (size_t ci = 0; ci < contexts.size(); ++ci) {
        const int ctx = contexts[ci];
        stream_cache[ci]->Reset();
        if (ctx > 0)
          G4_RETURN_IF_ERROR(PrefillSeconds(model, *stream_cache[ci], act, logits,
                                            std::vector<int>(ids.begin(), ids.begin() + ctx), chunk)
                                 .status());
        token[ci] = ids[ctx];
      }
      const int64_t calls0 = comm_calls();
      for (int done = 0, w = 0; done < decode_tokens; done += window, ++w) {
        const int n = std::min(window, decode_tokens - done);
        for (size_t k = 0; k < contexts.size(); ++k) {
          const size_t ci = w % 2 ? contexts.size() - 1 - k : k;
          const double c0 = comm_seconds();
          G4_ASSIGN_OR_RETURN(double s,
                              DecodeSeconds(model, *stream_cache[ci], act, logits, token[ci], n));
          comm_s[ci] += comm_seconds() - c0;
          seconds[ci] += s;
          window_tok_s[ci].push_back(n / s);
          if (!comm) window_read_gb_s[ci].push_back(ReadGbPerSecond(decode_spans, model.pool(), 1));
        }
      }
      collectives_per_token =
          static_cast<double>(comm_calls() - calls0) / (decode_tokens * contexts.size());
      for (size_t ci = 0; ci < contexts.size(); ++ci) {
        const double tps = decode_tokens / seconds[ci];
        if (tps > best[ci]) {
          best[ci] = tps;
          best_comm[ci] = comm_s[ci];
        }
      }
    }
    for (size_t ci = 0; ci < contexts.size(); ++ci) {
      decode[std::to_string(contexts[ci])] = best[ci];
      decode_comm[std::to_string(contexts[ci])] = best_comm[ci] * 1e3 / decode_tokens;
      if (!json_out && IsOutputRank(comm))
        std::fprintf(stderr, "decode at ctx %d: %.2f tok/s\n", contexts[ci], best[ci]);
    }
    if (!IsOutputRank(comm)) return OkStatus();
    j["decode_tok_s_by_ctx"] = decode;
    j["decode_tok_s"] = decode.contains("0") ? decode["0"] : decode.begin().value();
    if (decode.contains("2048")) j["decode_tok_s_ctx2048"] = decode["2048"];
    if (comm) {
      j["prefill_comm_ms_per_token_by_len"] = prefill_comm;
      j["decode_comm_ms_per_token_by_ctx"] = decode_comm;
      j["decode_collectives_per_token"] = collectives_per_token;
    }
    const int64_t wbytes = WeightBytesPerToken(model);  // this rank's share under --tp
    j["weight_bytes_per_token"] = wbytes;
    j["resident_weight_bytes"] = model.weights().resident_bytes;
    j["kv_cache_bytes"] = kv_bytes;  // every context's cache
    j["decode_gb_s"] = j["decode_tok_s"].get<double>() * wbytes / 1e9;
    j["mem_bw_gb_s"] = bw.triad_gb_s;
    j["mem_read_gb_s"] = bw.read_gb_s;
    j["roofline_tok_s"] = bw.read_gb_s * 1e9 / wbytes;
    // The paired figures: medians over windows. The base context is ctx 0 if measured, else the
    // smallest.
    const size_t base =
        static_cast<size_t>(std::min_element(contexts.begin(), contexts.end()) - contexts.begin());
    nlohmann::json windows = nlohmann::json::object(), read_fraction = nlohmann::json::object(),
                   ctx_ratio = nlohmann::json::object();
    double weight_read_gb_s = 0;
    for (size_t ci = 0; ci < contexts.size(); ++ci) {
      const std::string key = std::to_string(contexts[ci]);
      windows[key]["tok_s"] = window_tok_s[ci];
      std::vector<double> ratios;
      for (size_t k = 0; k < window_tok_s[ci].size(); ++k)
        ratios.push_back(window_tok_s[ci][k] / window_tok_s[base][k]);
      ctx_ratio[key] = Median(ratios);
      if (comm) continue;
      windows[key]["read_gb_s"] = window_read_gb_s[ci];
      std::vector<double> fractions;
      for (size_t k = 0; k < window_tok_s[ci].size(); ++k) {
        fractions.push_back(window_tok_s[ci][k] * wbytes / 1e9 / window_read_gb_s[ci][k]);
        weight_read_gb_s = std::max(weight_read_gb_s, window_read_gb_s[ci][k]);
      }
      read_fraction[key] = Median(fractions);
    }
    j["decode_window_tokens"] = window;
    j["decode_windows_by_ctx"] = windows;
    j["decode_ctx_ratio_by_ctx"] = ctx_ratio;
    if (!comm) {
      j["weight_read_gb_s"] = weight_read_gb_s;
      j["decode_read_fraction_by_ctx"] = read_fraction;
      j["decode_read_fraction"] = read_fraction[std::to_string(contexts[base])];
    }
    j["peak_rss_bytes"] = PeakRssBytes();

    if (json_out) {
      std::printf("%s\n", j.dump().c_str());
      return OkStatus();
    }
    const std::string tp_note = comm ? Str("  tp=", comm->size(), " (numbers are rank 0's)") : "";
    std::printf("g4 bench  %s  quant=%s  threads=%d  isa=%s  (load %.1f s)%s\n", model_dir.c_str(),
                held.c_str(), model.pool().size(), ActiveKernels().name, load_s, tp_note.c_str());
    std::printf("  %-34s %10s\n", "metric", "value");
    for (auto& [len, v] : prefill.items()) {
      std::printf("  prefill pp%-24s %10.2f tok/s\n", len.c_str(), v.get<double>());
      if (comm)
        std::printf("    %-32s %10.3f ms/token\n", "in collectives",
                    prefill_comm[len].get<double>());
    }
    std::printf("  %-34s %10.3f s\n",
                ("time to first token (pp" + std::to_string(prefill_lengths.front()) + ")").c_str(),
                j["ttft_s"].get<double>());
    for (auto& [ctx, v] : decode.items()) {
      std::printf("  decode tg%-4d at ctx %-14s %10.2f tok/s\n", decode_tokens, ctx.c_str(),
                  v.get<double>());
      if (comm)
        std::printf("    %-32s %10.3f ms/token\n", "in collectives",
                    decode_comm[ctx].get<double>());
    }
    if (comm)
      std::printf("  %-34s %10.0f\n", "collectives per decoded token", collectives_per_token);
    std::printf("  %-34s %10.3f GB\n",
                comm ? "weights read per token (rank 0)" : "weights read per token", wbytes / 1e9);
    std::printf("  %-34s %10.2f GB/s\n", "decode weight bandwidth", j["decode_gb_s"].get<double>());
    const double decode_gb_s = j["decode_gb_s"].get<double>();
    std::printf("  %-34s %10.2f GB/s (%.0f%% used by decode)\n", "memory triad (before load)",
                bw.triad_gb_s, 100.0 * decode_gb_s / bw.triad_gb_s);
    std::printf("  %-34s %10.2f GB/s (%.0f%% used by decode)\n", "memory read (before load)",
                bw.read_gb_s, 100.0 * decode_gb_s / bw.read_gb_s);
    if (!comm)
      std::printf("  %-34s %10.2f GB/s (%.0f%% used by decode)\n", "weights read alone (fastest)",
                  weight_read_gb_s, 100.0 * decode_gb_s / weight_read_gb_s);
    const size_t turns = window_tok_s[base].size();
    std::printf("  paired, median of %zu windows of %d tokens:\n", turns, window);
    for (size_t ci = 0; ci < contexts.size(); ++ci) {
      const std::string key = std::to_string(contexts[ci]);
      if (!comm)
        std::printf("    %-32s %9.1f%%\n", ("decode / weights read, ctx " + key).c_str(),
                    100.0 * read_fraction[key].get<double>());
      if (ci != base)
        std::printf("    %-32s %9.1f%%\n",
                    ("ctx " + key + " / ctx " + std::to_string(contexts[base])).c_str(),
                    100.0 * ctx_ratio[key].get<double>());
    }
    std::printf("  %-34s %10.2f GiB\n", "peak RSS",
                j["peak_rss_bytes"].get<int64_t>() / 1073741824.0);
    return OkStatus();
  });
  if (!st.ok()) return output_process ? Fail("bench", st) : 1;
  return 0;
}

}  // namespace

G4_COMMAND("bench", "measure prefill/decode speed, memory and bandwidth", RunBench);

}  // namespace g4::cli
