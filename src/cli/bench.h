// The pieces of `g4 bench` (bench.cc: flags and timing; bench_memory.cc: the machine's memory
// bandwidth; bench_report.cc: the JSON object and the table printed from it).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/thread_pool.h"
#include "cli/spec_flags.h"
#include "model/forward.h"
#include "model/kv_cache.h"

namespace g4::cli {

struct BenchFlags {
  std::string model_dir, quant = "bf16", kv_type = "f32";
  int threads = 0, chunk = 512, decode_tokens = 128, decode_window = 16, reps = 1, tp = 0,
      mem_bw_mib = 0;
  std::vector<int> contexts{0, 512, 2048};  // each listed once (CheckBenchFlags)
  std::vector<int> prefill_lengths{128, 512};
  bool json_out = false, warmup = true;
  SpecFlags spec;  // --spec: adds the verify cost and a speculative decode (bench_spec.cc)
  std::string json_schema;  // --json-schema: adds decode held to a schema (bench_schema.cc),
                            // with --spec also speculative decode held to it
  std::string json_schema_gbnf;  // its grammar, compiled before the model loads
  std::vector<int> streams;      // --streams: adds batched decode of N sequences (bench_streams.cc)
};

// ---- bench_memory.cc

struct Bandwidth {
  double triad_gb_s = 0;  // a = b + s c, 3 arrays counted (STREAM's convention)
  double read_gb_s = 0;   // one array streamed: the access pattern of decode
};

// STREAM-style triad and read bandwidth over `pool`, before the model loads (see the .cc).
Bandwidth MeasureBandwidth(ThreadPool& pool, int array_mib);

using ByteSpans = std::vector<std::pair<const uint8_t*, size_t>>;

// Byte ranges read in pieces of the decode task size, all in one ParallelFor over `pool`: GB/s of
// the fastest of `passes` passes.
double ReadGbPerSecond(const ByteSpans& spans, ThreadPool& pool, int passes);

// VmHWM: the process's peak resident set so far.
int64_t PeakRssBytes();

// ---- bench.cc: what the timing loops measured, on this rank

struct PrefillTimes {
  nlohmann::json tok_s = nlohmann::json::object();              // best, by prompt length
  nlohmann::json comm_ms_per_token = nlohmann::json::object();  // in collectives, same runs
  double ttft_s = 0;  // prefill of the first --prefill length to its first token
};

struct DecodeTimes {
  nlohmann::json tok_s = nlohmann::json::object();              // best, by context
  nlohmann::json comm_ms_per_token = nlohmann::json::object();  // in collectives, same runs
  // The prefill that filled each context > 0 before its decode (best of --reps): the prefill rate
  // at that length, measured at no extra cost.
  nlohmann::json fill_tok_s = nlohmann::json::object();
  double collectives_per_token = 0;
  int window = 0;       // tokens per turn
  size_t kv_bytes = 0;  // every context's cache
  // Per context (in --contexts order): each window's tok/s and, without tensor parallelism, the
  // weights-alone read right after it (GB/s).
  std::vector<std::vector<double>> window_tok_s, window_read_gb_s;
};

// Prefill of `ids` into an empty `cache` in chunks of `chunk` rows; seconds until the last row's logits.
Result<double> PrefillSeconds(Model& model, KvCache& cache, Activations& act, std::vector<float>& logits,
                              const std::vector<int>& ids, int chunk);

// ---- bench_report.cc

struct BenchFacts {
  std::string held_quant;  // the format the weights are in (an artifact's own)
  double load_s = 0;
  Bandwidth bandwidth;
  bool tensor_parallel = false;  // ran with a communicator: numbers are rank 0's
};

// The median of `v` (0 when empty).
double Median(std::vector<double> v);

// Everything `g4 bench --json` prints; the table is printed from it.
nlohmann::json BenchJson(const BenchFlags& flags, Model& model, const Communicator* comm,
                         const BenchFacts& facts, const PrefillTimes& prefill, const DecodeTimes& decode);
void PrintBenchTable(const BenchFlags& flags, const BenchFacts& facts, const nlohmann::json& j);

// ---- bench_spec.cc

// Verify-pass cost by row count, and plain vs speculative greedy decode of ids[0, first context)
// alternately (--reps rounds): the JSON object under "speculative".
Result<nlohmann::json> BenchSpeculative(const BenchFlags& flags, Model& model, SpecSetup& setup,
                                        const std::vector<int>& ids);
void PrintSpecTable(const nlohmann::json& spec);

// ---- bench_streams.cc

// Aggregate greedy decode of each --streams count of sequences, one row each per forward pass,
// after the first --contexts tokens of context, in turns with a prefill of the longest --prefill
// length into `prefill_cache` (sized for it); and the largest count's first window checked
// against each sequence decoded alone: the JSON object under "streams".
Result<nlohmann::json> BenchStreams(const BenchFlags& flags, Model& model, KvCache& prefill_cache,
                                    const std::vector<int>& ids);
void PrintStreamsTable(const nlohmann::json& streams);

// ---- bench_schema.cc

// The grammar for --json-schema: "json_object" or a file holding a JSON schema.
Result<std::string> BenchSchemaGbnf(const std::string& arg);
// Plain vs schema-constrained greedy decode of ids[0, first context) alternately (--reps rounds),
// with `spec` (--spec) also constrained speculative decode, and the token masks' own cost per
// token: the JSON object under "constrained".
Result<nlohmann::json> BenchSchema(const BenchFlags& flags, Model& model, SpecSetup* spec,
                                   const std::vector<int>& ids);
void PrintSchemaTable(const nlohmann::json& constrained);

// The weight matrices one decoded token multiplies by (the tied LM head in full).
ByteSpans DecodeMatrices(const Model& model);

}  // namespace g4::cli
