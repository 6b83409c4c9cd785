// g4 serve: the OpenAI-compatible HTTP server (cpp-httplib) over the continuous-batching
// Scheduler. HTTP threads parse and validate requests, tokenize, enqueue and wait (or stream SSE);
// the engine thread does all model work. See docs/server.md for routes and fields.
#pragma once

#include <string>

namespace g4 {

struct ServerOptions {
  std::string model_dir;
  std::string model_name;  // "" -> the directory's name
  std::string host = "127.0.0.1";
  int port = 8080;
  int context = 0;  // per slot; 0 -> min(4096, model max)
  int parallel = 4;
  int max_queue = 64;
  int threads = 0;  // compute threads (per rank); 0 = all cores (shared among the ranks)
  // Tensor-parallel ranks: > 1 runs that many ranks as threads of this process; under mpirun
  // this process is rank 0 of the world (of this size) and the others follow
  // (parallel/tp_serve.h).
  int tp = 1;
  std::string quant = "bf16";  // weight format at load: bf16 (as shipped), q8, q4
  int http_threads = 0;  // 0 -> parallel + max_queue + 16
  std::string api_key;
  double timeout_seconds = 600;  // per request, unless it asks for less
  double grace_seconds = 30;     // SIGTERM: time for in-flight requests to finish
  size_t max_body_bytes = 8 << 20;
  // Whole-body deadline: httplib's read timeout is per recv, so without it a client trickling
  // one byte per second holds an HTTP thread for as long as it likes (slowloris). 408 after it.
  double body_timeout_seconds = 30;
  int prefill_chunk = 64;
  int max_batch_rows = 256;
  bool prefix_reuse = true;
  bool log_requests = true;
};

// Runs until SIGTERM/SIGINT (then drains) or a fatal error. Returns the process exit code.
int RunServer(const ServerOptions& options);

}  // namespace g4
