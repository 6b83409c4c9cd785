#include "server/metrics.h"

#include <unistd.h>

#include <cstdio>

#include "base/status.h"

namespace g4 {

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i]++;
  sum_ += v;
  count_++;
}

void Histogram::Render(const std::string& name, std::string* out) const {
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    *out += Str(name, "_bucket{le=\"", bounds_[i], "\"} ", cum, "\n");
  }
  *out += Str(name, "_bucket{le=\"+Inf\"} ", count_, "\n", name, "_sum ", sum_, "\n", name, "_count ", count_, "\n");
}

Metrics::Metrics()
    : start_(std::chrono::steady_clock::now()),
      ttft_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      token_latency_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
      request_seconds_({0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}) {}

void Metrics::CountRequest(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  requests_[{route, status}]++;
}
void Metrics::CountError(const std::string& kind) {
  std::lock_guard<std::mutex> lock(mutex_);
  errors_[kind]++;
}
void Metrics::CountFinish(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  finishes_[reason]++;
}
void Metrics::AddTokens(int prompt, int cached, int completion) {
  std::lock_guard<std::mutex> lock(mutex_);
  prompt_tokens_ += prompt;
  cached_tokens_ += cached;
  completion_tokens_ += completion;
}
void Metrics::ObserveTtft(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ttft_.Observe(seconds);
}
void Metrics::ObserveTokenLatency(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  token_latency_.Observe(seconds);
}
void Metrics::ObserveRequestSeconds(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  request_seconds_.Observe(seconds);
}

size_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

namespace {
void Header(std::string* out, const char* name, const char* type, const char* help) {
  *out += Str("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}
// --spec: a target pass is one slot's decode step with speculation on; it yields 1 + the drafts
// the target kept.
void RenderSpeculative(const SchedulerStats& s, std::string* out) {
  Header(out, "g4_spec_target_passes_total", "counter", "Speculating slots' decode steps (target passes).");
  *out += Str("g4_spec_target_passes_total ", s.spec_target_passes, "\n");
  Header(out, "g4_spec_tokens_total", "counter", "Tokens those target passes produced.");
  *out += Str("g4_spec_tokens_total ", s.spec_tokens, "\n");
  Header(out, "g4_spec_drafted_tokens_total", "counter", "Drafted tokens verified by the target.");
  *out += Str("g4_spec_drafted_tokens_total ", s.spec_drafted, "\n");
  Header(out, "g4_spec_accepted_tokens_total", "counter", "Drafted tokens the target kept.");
  *out += Str("g4_spec_accepted_tokens_total ", s.spec_accepted, "\n");
  Header(out, "g4_spec_draft_seconds_total", "counter", "Time spent drafting (on the engine thread).");
  *out += Str("g4_spec_draft_seconds_total ", s.spec_draft_seconds, "\n");
  Header(out, "g4_spec_acceptance_rate", "gauge", "Accepted / drafted tokens since start.");
  *out += Str("g4_spec_acceptance_rate ",
              s.spec_drafted ? static_cast<double>(s.spec_accepted) / s.spec_drafted : 0.0, "\n");
  Header(out, "g4_spec_tokens_per_target_pass", "gauge", "Tokens per speculating slot's decode step since start.");
  *out += Str("g4_spec_tokens_per_target_pass ",
              s.spec_target_passes ? static_cast<double>(s.spec_tokens) / s.spec_target_passes : 0.0, "\n");
}

}  // namespace

std::string Metrics::Render(const ServerGauges& g) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  const double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  Header(&out, "g4_up", "gauge", "1 when the model is loaded and the server takes requests.");
  out += Str("g4_up ", g.ready && !g.draining ? 1 : 0, "\n");
  Header(&out, "g4_draining", "gauge", "1 after SIGTERM while in-flight requests finish.");
  out += Str("g4_draining ", g.draining ? 1 : 0, "\n");
  Header(&out, "g4_uptime_seconds", "gauge", "Seconds since the server started.");
  out += Str("g4_uptime_seconds ", uptime, "\n");
  Header(&out, "g4_requests_total", "counter", "HTTP requests by route and status.");
  for (const auto& [key, n] : requests_)
    out += Str("g4_requests_total{route=\"", key.first, "\",status=\"", key.second, "\"} ", n, "\n");
  Header(&out, "g4_errors_total", "counter", "Failed requests by kind.");
  for (const auto& [kind, n] : errors_) out += Str("g4_errors_total{kind=\"", kind, "\"} ", n, "\n");
  Header(&out, "g4_finish_total", "counter", "Finished generations by finish_reason.");
  for (const auto& [reason, n] : finishes_) out += Str("g4_finish_total{reason=\"", reason, "\"} ", n, "\n");
  Header(&out, "g4_prompt_tokens_total", "counter", "Prompt tokens of finished generations.");
  out += Str("g4_prompt_tokens_total ", prompt_tokens_, "\n");
  Header(&out, "g4_prompt_tokens_cached_total", "counter", "Prompt tokens reused from a slot's cache.");
  out += Str("g4_prompt_tokens_cached_total ", cached_tokens_, "\n");
  Header(&out, "g4_completion_tokens_total", "counter", "Generated tokens.");
  out += Str("g4_completion_tokens_total ", completion_tokens_, "\n");
  Header(&out, "g4_time_to_first_token_seconds", "histogram", "Request arrival to first generated token.");
  ttft_.Render("g4_time_to_first_token_seconds", &out);
  Header(&out, "g4_time_per_output_token_seconds", "histogram", "Time between consecutive generated tokens.");
  token_latency_.Render("g4_time_per_output_token_seconds", &out);
  Header(&out, "g4_request_duration_seconds", "histogram", "Generation requests, arrival to last token.");
  request_seconds_.Render("g4_request_duration_seconds", &out);
  Header(&out, "g4_requests_in_flight", "gauge", "HTTP requests being handled.");
  out += Str("g4_requests_in_flight ", g.in_flight, "\n");
  if (g.have_scheduler) {
    const SchedulerStats& s = g.scheduler;
    Header(&out, "g4_queue_depth", "gauge", "Sequences waiting for a slot.");
    out += Str("g4_queue_depth ", s.queued, "\n");
    Header(&out, "g4_slots_busy", "gauge", "Slots running a sequence.");
    out += Str("g4_slots_busy ", s.running, "\n");
    Header(&out, "g4_slots_total", "gauge", "Slots (--parallel).");
    out += Str("g4_slots_total ", s.slots, "\n");
    Header(&out, "g4_context_tokens", "gauge", "Context per slot (--ctx).");
    out += Str("g4_context_tokens ", g.context, "\n");
    Header(&out, "g4_kv_cache_tokens_used", "gauge", "KV cache positions held by running sequences.");
    out += Str("g4_kv_cache_tokens_used ", s.kv_tokens_used, "\n");
    Header(&out, "g4_kv_cache_tokens_total", "gauge", "KV cache positions over all slots.");
    out += Str("g4_kv_cache_tokens_total ", s.kv_tokens_total, "\n");
    Header(&out, "g4_kv_cache_usage_ratio", "gauge", "Used / total KV cache positions.");
    out += Str("g4_kv_cache_usage_ratio ",
               s.kv_tokens_total ? static_cast<double>(s.kv_tokens_used) / s.kv_tokens_total : 0.0, "\n");
    Header(&out, "g4_kv_cache_bytes", "gauge", "Memory allocated for KV caches.");
    out += Str("g4_kv_cache_bytes ", s.kv_bytes, "\n");
    Header(&out, "g4_decode_steps_total", "counter", "Batched forward calls.");
    out += Str("g4_decode_steps_total ", s.steps, "\n");
    Header(&out, "g4_batch_rows_total", "counter", "Rows (tokens) run through those calls.");
    out += Str("g4_batch_rows_total ", s.rows, "\n");
    if (s.speculative) RenderSpeculative(s, &out);
  }
  Header(&out, "process_resident_memory_bytes", "gauge", "Resident memory (from /proc/self/statm).");
  out += Str("process_resident_memory_bytes ", ResidentBytes(), "\n");
  return out;
}

}  // namespace g4
