// g4 bench: the report. One JSON object holds every figure (--json prints it); the table is
// printed from that object, so the two cannot disagree.
#include <algorithm>
#include <cstdio>
#include <string>

#include "cli/bench.h"
#include "kernels/cpu_kernels.h"
#include "kernels/ops.h"

namespace g4::cli {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

namespace {

// Weight bytes one decoded token reads: the decode matrices, one embedding row and one PLE row.
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

// The base context of the paired ratios: ctx 0 if measured, else the smallest.
size_t BaseContext(const std::vector<int>& contexts) {
  return static_cast<size_t>(std::min_element(contexts.begin(), contexts.end()) - contexts.begin());
}

// The paired figures: medians over windows (decode against the weights-alone read right after
// it, and each context against the base context in the same turn).
void AddPairedFigures(const BenchFlags& flags, const DecodeTimes& decode, bool tensor_parallel,
                      int64_t wbytes, nlohmann::json& j) {
  const std::vector<int>& contexts = flags.contexts;
  const size_t base = BaseContext(contexts);
  nlohmann::json windows = nlohmann::json::object(), read_fraction = nlohmann::json::object(),
                 ctx_ratio = nlohmann::json::object();
  double weight_read_gb_s = 0;
  for (size_t ci = 0; ci < contexts.size(); ++ci) {
    const std::string key = std::to_string(contexts[ci]);
    windows[key]["tok_s"] = decode.window_tok_s[ci];
    std::vector<double> ratios;
    for (size_t k = 0; k < decode.window_tok_s[ci].size(); ++k)
      ratios.push_back(decode.window_tok_s[ci][k] / decode.window_tok_s[base][k]);
    ctx_ratio[key] = Median(ratios);
    if (tensor_parallel) continue;
    windows[key]["read_gb_s"] = decode.window_read_gb_s[ci];
    std::vector<double> fractions;
    for (size_t k = 0; k < decode.window_tok_s[ci].size(); ++k) {
      fractions.push_back(decode.window_tok_s[ci][k] * wbytes / 1e9 / decode.window_read_gb_s[ci][k]);
      weight_read_gb_s = std::max(weight_read_gb_s, decode.window_read_gb_s[ci][k]);
    }
    read_fraction[key] = Median(fractions);
  }
  j["decode_window_tokens"] = decode.window;
  j["decode_windows_by_ctx"] = windows;
  j["decode_ctx_ratio_by_ctx"] = ctx_ratio;
  if (!tensor_parallel) {
    j["weight_read_gb_s"] = weight_read_gb_s;
    j["decode_read_fraction_by_ctx"] = read_fraction;
    j["decode_read_fraction"] = read_fraction[std::to_string(contexts[base])];
  }
}

}  // namespace

ByteSpans DecodeMatrices(const Model& model) {
  ByteSpans spans;
  for (const WeightMatrix* m : model.weights().Matrices())
    if (!m->empty()) spans.push_back({static_cast<const uint8_t*>(m->data), m->bytes});
  return spans;
}

nlohmann::json BenchJson(const BenchFlags& flags, Model& model, const Communicator* comm,
                         const BenchFacts& facts, const PrefillTimes& prefill, const DecodeTimes& decode) {
  nlohmann::json j;
  j["model"] = flags.model_dir;
  j["warmup"] = flags.warmup;
  j["quant"] = facts.held_quant;
  j["kv_type"] = flags.kv_type;
  j["threads"] = model.pool().size();
  j["tp"] = comm ? comm->size() : 1;
  j["isa"] = ActiveKernels().name;
  j["load_s"] = facts.load_s;
  j["ttft_s"] = prefill.ttft_s;
  j["prefill_tok_s_by_len"] = prefill.tok_s;
  j["prefill_tok_s"] = prefill.tok_s.contains("512")
                           ? prefill.tok_s["512"]
                           : prefill.tok_s[std::to_string(flags.prefill_lengths.back())];
  j["decode_tok_s_by_ctx"] = decode.tok_s;
  j["context_fill_tok_s_by_ctx"] = decode.fill_tok_s;
  j["decode_tok_s"] = decode.tok_s.contains("0") ? decode.tok_s["0"] : decode.tok_s.begin().value();
  if (decode.tok_s.contains("2048")) j["decode_tok_s_ctx2048"] = decode.tok_s["2048"];
  if (facts.tensor_parallel) {
    j["prefill_comm_ms_per_token_by_len"] = prefill.comm_ms_per_token;
    j["decode_comm_ms_per_token_by_ctx"] = decode.comm_ms_per_token;
    j["decode_collectives_per_token"] = decode.collectives_per_token;
  }
  const int64_t wbytes = WeightBytesPerToken(model);  // this rank's share under --tp
  j["weight_bytes_per_token"] = wbytes;
  j["resident_weight_bytes"] = model.weights().resident_bytes;
  j["kv_cache_bytes"] = decode.kv_bytes;
  j["decode_gb_s"] = j["decode_tok_s"].get<double>() * wbytes / 1e9;
  j["mem_bw_gb_s"] = facts.bandwidth.triad_gb_s;
  j["mem_read_gb_s"] = facts.bandwidth.read_gb_s;
  j["roofline_tok_s"] = facts.bandwidth.read_gb_s * 1e9 / wbytes;
  AddPairedFigures(flags, decode, facts.tensor_parallel, wbytes, j);
  j["peak_rss_bytes"] = PeakRssBytes();
  return j;
}

void PrintBenchTable(const BenchFlags& flags, const BenchFacts& facts, const nlohmann::json& j) {
  const bool tp = facts.tensor_parallel;
  const std::string tp_note = tp ? Str("  tp=", j["tp"].get<int>(), " (numbers are rank 0's)") : "";
  std::printf("g4 bench  %s  quant=%s  kv=%s  threads=%d  isa=%s  (load %.1f s)%s\n", flags.model_dir.c_str(),
              facts.held_quant.c_str(), flags.kv_type.c_str(), j["threads"].get<int>(), j["isa"].get<std::string>().c_str(),
              facts.load_s, tp_note.c_str());
  std::printf("  %-34s %10s\n", "metric", "value");
  for (auto& [len, v] : j["prefill_tok_s_by_len"].items()) {
    std::printf("  prefill pp%-24s %10.2f tok/s\n", len.c_str(), v.get<double>());
    if (tp)
      std::printf("    %-32s %10.3f ms/token\n", "in collectives",
                  j["prefill_comm_ms_per_token_by_len"][len].get<double>());
  }
  std::printf("  %-34s %10.3f s\n",
              ("time to first token (pp" + std::to_string(flags.prefill_lengths.front()) + ")").c_str(),
              j["ttft_s"].get<double>());
  for (auto& [ctx, v] : j["context_fill_tok_s_by_ctx"].items())
    std::printf("  prefill filling ctx %-14s %10.2f tok/s\n", ctx.c_str(), v.get<double>());
  for (auto& [ctx, v] : j["decode_tok_s_by_ctx"].items()) {
    std::printf("  decode tg%-4d at ctx %-14s %10.2f tok/s\n", flags.decode_tokens, ctx.c_str(),
                v.get<double>());
    if (tp)
      std::printf("    %-32s %10.3f ms/token\n", "in collectives",
                  j["decode_comm_ms_per_token_by_ctx"][ctx].get<double>());
  }
  if (tp)
    std::printf("  %-34s %10.0f\n", "collectives per decoded token",
                j["decode_collectives_per_token"].get<double>());
  const int64_t wbytes = j["weight_bytes_per_token"].get<int64_t>();
  std::printf("  %-34s %10.3f GB\n",
              tp ? "weights read per token (rank 0)" : "weights read per token", wbytes / 1e9);
  const double decode_gb_s = j["decode_gb_s"].get<double>();
  std::printf("  %-34s %10.2f GB/s\n", "decode weight bandwidth", decode_gb_s);
  const Bandwidth& bw = facts.bandwidth;
  std::printf("  %-34s %10.2f GB/s (%.0f%% used by decode)\n", "memory triad (before load)",
              bw.triad_gb_s, 100.0 * decode_gb_s / bw.triad_gb_s);
  std::printf("  %-34s %10.2f GB/s (%.0f%% used by decode)\n", "memory read (before load)",
              bw.read_gb_s, 100.0 * decode_gb_s / bw.read_gb_s);
  if (!tp) {
    const double weight_read_gb_s = j["weight_read_gb_s"].get<double>();
    std::printf("  %-34s %10.2f GB/s (%.0f%% used by decode)\n", "weights read alone (fastest)",
                weight_read_gb_s, 100.0 * decode_gb_s / weight_read_gb_s);
  }
  const std::vector<int>& contexts = flags.contexts;
  const size_t base = BaseContext(contexts);
  const std::string base_key = std::to_string(contexts[base]);
  const size_t turns = j["decode_windows_by_ctx"][base_key]["tok_s"].size();
  std::printf("  paired, median of %zu windows of %d tokens:\n", turns, j["decode_window_tokens"].get<int>());
  for (size_t ci = 0; ci < contexts.size(); ++ci) {
    const std::string key = std::to_string(contexts[ci]);
    if (!tp)
      std::printf("    %-32s %9.1f%%\n", ("decode / weights read, ctx " + key).c_str(),
                  100.0 * j["decode_read_fraction_by_ctx"][key].get<double>());
    if (ci != base)
      std::printf("    %-32s %9.1f%%\n", ("ctx " + key + " / ctx " + base_key).c_str(),
                  100.0 * j["decode_ctx_ratio_by_ctx"][key].get<double>());
  }
  std::printf("  %-34s %10.2f GiB\n", "peak RSS", j["peak_rss_bytes"].get<int64_t>() / 1073741824.0);
}

}  // namespace g4::cli
