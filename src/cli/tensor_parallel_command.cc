#include "cli/tensor_parallel_command.h"

#include "cli/cli_util.h"

namespace g4::cli {

int RunTensorParallelCommand(const char* command, int tp,
                             const std::function<Status(Communicator* comm)>& body) {
  const bool output_process = IsOutputProcess();
  const Status st = RunTensorParallel(tp, body);
  if (st.ok()) return 0;
  return output_process || !IsPeerFailure(st) ? Fail(command, st) : 1;
}

}  // namespace g4::cli
