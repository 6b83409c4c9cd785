// Server metrics in the Prometheus text format (GET /metrics). Counters and histograms are
// updated from HTTP threads and the engine thread; one mutex is plenty at these rates.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/scheduler.h"

namespace g4 {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void Observe(double v);
  // Appends `name`_bucket/_sum/_count lines.
  void Render(const std::string& name, std::string* out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct ServerGauges {
  bool ready = false;
  bool draining = false;
  int in_flight = 0;  // HTTP requests being handled
  bool have_scheduler = false;
  SchedulerStats scheduler;
  int context = 0;
};

class Metrics {
 public:
  Metrics();
  void CountRequest(const std::string& route, int status);
  void CountError(const std::string& kind);
  void CountFinish(const std::string& reason);
  void AddTokens(int prompt, int cached, int completion);
  void ObserveTtft(double seconds);
  void ObserveTokenLatency(double seconds);
  void ObserveRequestSeconds(double seconds);
  std::string Render(const ServerGauges& gauges) const;

 private:
  mutable std::mutex mutex_;
  std::chrono::steady_clock::time_point start_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, uint64_t> errors_;
  std::map<std::string, uint64_t> finishes_;
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, completion_tokens_ = 0;
  Histogram ttft_, token_latency_, request_seconds_;
};

// Resident set size from /proc/self/statm, in bytes (0 if unreadable).
size_t ResidentBytes();

}  // namespace g4
