// The probe: the target side of `g4 validate`. It loads a model the way the server does and
// answers greedy (Generate, the server's decode loop) and teacher-forced (Prefill) requests;
// `g4 probe` runs it in a fresh process, so validate checks what a new server process would load.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "model/forward.h"

namespace g4::cli {

struct ProbeRequest {
  std::vector<std::vector<int>> greedy;
  int n_new = 32;
  std::vector<int> teacher;
  int chunk = 16;
};

struct ProbeResult {
  std::vector<std::vector<int>> greedy;
  std::vector<float> teacher_logits;  // softcapped, [teacher.size(), vocab]
  int vocab = 0;
  double load_seconds = 0;
  std::string weights;  // formats actually loaded, joined by "+", e.g. "bf16" or "bf16+q8"
  bool artifact = false;
};

// In this process. tp > 1: that many ranks as threads of this process, each loading its share
// through LoadModel (an artifact's own rank sections), as `g4 run --tp` and the server's
// ranks do.
Result<ProbeResult> RunProbe(const std::string& model_path, WeightType quant, int threads, int tp,
                             const ProbeRequest& req);

// Runs `g4 probe` in a child process (this very binary) and reads its answer back; *child_pid is
// the child's pid, for the report.
Result<ProbeResult> RunProbeChild(const std::string& model_path, const std::string& quant,
                                  int threads, int tp, const ProbeRequest& req, int* child_pid);

}  // namespace g4::cli
