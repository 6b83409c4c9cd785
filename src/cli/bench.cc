// g4 bench: prefill / decode speed, time to first token, peak memory, and decode bandwidth
// against a STREAM-style measurement taken in the same run (the decode roofline of this machine).
// With --tp N (or under mpirun) the model runs over N tensor-parallel ranks and the time rank 0
// spends in collectives per token is reported too (g4 bench-tp compares several rank counts).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
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

struct Bandwidth {
  double triad_gb_s = 0;  // a = b + s c, 3 arrays counted
  double read_gb_s = 0;   // sum of one array: the access pattern of decode
};

// Arrays of 128 MiB each, far past the caches; best of several passes, with the same pool and
// thread count as the model.
Bandwidth MeasureBandwidth(ThreadPool& pool) {
  const size_t n = size_t{32} << 20;  // floats per array
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n, 0.5f);
  const int64_t tasks = 256;
  const size_t per = n / tasks;
  Bandwidth bw;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = Clock::now();
    pool.ParallelFor(tasks, [&](int64_t t, int) {
      float* pa = a.data() + t * per;
      const float *pb = b.data() + t * per, *pc = c.data() + t * per;
      for (size_t i = 0; i < per; ++i) pa[i] = pb[i] + 0.5f * pc[i];
    });
    bw.triad_gb_s = std::max(bw.triad_gb_s, 3.0 * n * sizeof(float) / Seconds(t0) / 1e9);
    // Read twice: plain, and asking for the bytes 12 KiB ahead as the decode kernels do (on the dev
    // VMs the hardware prefetcher alone leaves a core well under its bandwidth). The faster one is
    // the machine's read bandwidth; decode is judged against that, not against a slow loop.
    std::vector<double> sums(tasks);
    for (const bool prefetch : {false, true}) {
      t0 = Clock::now();
      pool.ParallelFor(tasks, [&](int64_t t, int) {
        const float* p = b.data() + t * per;
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
        for (size_t i = 0; i < per; i += 8) {
          if (prefetch && i % 16 == 0) __builtin_prefetch(p + i + 3072, 0, 3);
          s0 += p[i], s1 += p[i + 1], s2 += p[i + 2], s3 += p[i + 3];
          s4 += p[i + 4], s5 += p[i + 5], s6 += p[i + 6], s7 += p[i + 7];
        }
        sums[t] += s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
      });
      bw.read_gb_s = std::max(bw.read_gb_s, 1.0 * n * sizeof(float) / Seconds(t0) / 1e9);
    }
    if (sums[0] == 1234.5) std::printf(" ");  // keep the sums alive
  }
  return bw;
}

// Weight bytes one decoded token reads: every matrix the forward pass multiplies by (the tied
// LM head in full), one embedding row and one PLE row.
int64_t WeightBytesPerToken(const Model& model) {
  const ModelWeights& w = model.weights();
  const ModelPlan& plan = model.plan();
  int64_t bytes =
      static_cast<int64_t>(w.embed.bytes) + static_cast<int64_t>(w.embed.bytes) / plan.vocab;
  bytes += static_cast<int64_t>(w.ple_model_projection.bytes);
  if (plan.ple_dim > 0)
    bytes += static_cast<int64_t>(plan.n_layers()) * plan.ple_dim *
             static_cast<int64_t>(DTypeSize(w.ple_dtype));
  for (const LayerWeights& l : w.layers)
    for (const WeightMatrix* m : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj,
                                  &l.up_proj, &l.down_proj, &l.ple_gate, &l.ple_projection})
      bytes += static_cast<int64_t>(m->bytes);
  return bytes;
}

std::vector<int> RandomIds(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> ids{2};
  while (static_cast<int>(ids.size()) < n)
    ids.push_back(static_cast<int>(rng() % (vocab - 10)) + 10);
  return ids;
}

struct DecodeResult {
  double tok_s = 0;
};

// Greedy decode of `n` tokens after the cache's current contents; argmax of the raw logits (the
// softcap is monotonic, so greedy never needs it).
Result<double> Decode(Model& model, KvCache& cache, Activations& act, std::vector<float>& logits,
                      int first, int n) {
  std::vector<BatchRow> rows(1);
  int token = first;
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    rows[0] = BatchRow{token, cache.n_past(), &cache, true};
    G4_RETURN_IF_ERROR(model.Forward(rows, act, logits.data()));
    token = static_cast<int>(ArgMax(logits.data(), model.plan().vocab));
  }
  return n / Seconds(t0);
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
  int threads = 0, chunk = 512, decode_tokens = 128, reps = 1, tp = 0;
  std::vector<int> contexts{0, 512, 2048};
  std::vector<int> prefill_lengths{128, 512};
  bool json_out = false;
  app.add_option("--model", model_dir, "model directory (Hugging Face layout)");
  app.add_option("--quant", quant, "weight format: bf16 (as shipped), q8, q4")
      ->check(CLI::IsMember({"bf16", "q8", "q4"}));
  app.add_option("--threads", threads, "threads per rank (0 = all cores, shared among the ranks)");
  app.add_option("--tp", tp,
                 "tensor-parallel ranks: threads in this process, or one per process under "
                 "mpirun (default: 1, or mpirun's -np); adds the time in collectives per token");
  app.add_option("--chunk", chunk, "prefill chunk (rows per forward call)");
  app.add_option("--decode-tokens", decode_tokens, "tokens per decode measurement");
  app.add_option("--contexts", contexts, "decode measured after this many cached tokens");
  app.add_option("--prefill", prefill_lengths, "prompt lengths for prefill tok/s");
  app.add_option("--reps", reps, "repetitions (best is reported)");
  app.add_flag("--json", json_out, "print one JSON object");
  CLI11_PARSE(app, argc, argv);
  if (prefill_lengths.empty() || contexts.empty() || decode_tokens < 1 || reps < 1 || tp < 0)
    return Fail(
        "bench",
        Status::Error("--prefill and --contexts need a value, --decode-tokens and --reps >= 1, "
                      "--tp >= 1"));
  for (int v : prefill_lengths)
    if (v < 1) return Fail("bench", Status::Error("--prefill lengths must be >= 1"));
  for (int v : contexts)
    if (v < 0) return Fail("bench", Status::Error("--contexts must be >= 0"));

  ModelOptions options;
  options.threads = threads;
  ParseWeightType(quant, &options.load.quant);
  // Under mpirun only rank 0 measures the machine and reports; the others run the same steps.
  const bool output_process = IsOutputProcess();
  Bandwidth bw;
  if (output_process) {
    ThreadPool pool(threads);
    bw = MeasureBandwidth(pool);
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

    nlohmann::json j;
    j["model"] = model_dir;
    j["quant"] = quant;
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
    for (int ctx : contexts) {
      double best = 0, best_comm = 0;
      for (int r = 0; r < reps; ++r) {
        cache.Reset();
        if (ctx > 0)
          G4_RETURN_IF_ERROR(PrefillSeconds(model, cache, act, logits,
                                            std::vector<int>(ids.begin(), ids.begin() + ctx), chunk)
                                 .status());
        const double c0 = comm_seconds();
        const int64_t calls0 = comm_calls();
        G4_ASSIGN_OR_RETURN(double tps, Decode(model, cache, act, logits, ids[ctx], decode_tokens));
        if (tps > best) {
          best = tps;
          best_comm = comm_seconds() - c0;
        }
        collectives_per_token = static_cast<double>(comm_calls() - calls0) / decode_tokens;
      }
      decode[std::to_string(ctx)] = best;
      decode_comm[std::to_string(ctx)] = best_comm * 1e3 / decode_tokens;
      if (!json_out && IsOutputRank(comm))
        std::fprintf(stderr, "decode at ctx %d: %.2f tok/s\n", ctx, best);
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
    j["kv_cache_bytes"] = cache.bytes();
    j["decode_gb_s"] = j["decode_tok_s"].get<double>() * wbytes / 1e9;
    j["mem_bw_gb_s"] = bw.triad_gb_s;
    j["mem_read_gb_s"] = bw.read_gb_s;
    j["roofline_tok_s"] = bw.read_gb_s * 1e9 / wbytes;
    j["peak_rss_bytes"] = PeakRssBytes();

    if (json_out) {
      std::printf("%s\n", j.dump().c_str());
      return OkStatus();
    }
    const std::string tp_note = comm ? Str("  tp=", comm->size(), " (numbers are rank 0's)") : "";
    std::printf("g4 bench  %s  quant=%s  threads=%d  isa=%s  (load %.1f s)%s\n", model_dir.c_str(),
                quant.c_str(), model.pool().size(), ActiveKernels().name, load_s, tp_note.c_str());
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
    std::printf("  %-34s %10.2f GB/s\n", "memory triad (same run)", bw.triad_gb_s);
    std::printf("  %-34s %10.2f GB/s (%.0f%% used by decode)\n", "memory read (same run)",
                bw.read_gb_s, 100.0 * j["decode_gb_s"].get<double>() / bw.read_gb_s);
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
