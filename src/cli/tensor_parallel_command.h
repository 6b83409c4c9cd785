// The common ending of the commands that run a model over tensor-parallel ranks.
#pragma once

#include <functional>

#include "parallel/tensor_parallel.h"

namespace g4::cli {

// Runs body on every rank (RunTensorParallel) and turns the outcome into the exit code: 0, or 1
// after "g4 <command>: <error>" on stderr. Under mpirun a process other than rank 0 stays quiet
// when its error only says that a peer failed to load (that peer prints the cause), so each
// cause is printed once and a rank's own failure (e.g. a damaged section of its share) is not lost.
int RunTensorParallelCommand(const char* command, int tp,
                             const std::function<Status(Communicator* comm)>& body);

}  // namespace g4::cli
