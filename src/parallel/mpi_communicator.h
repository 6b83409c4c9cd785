// Tensor parallelism across processes (and hosts) over MPI: one rank per process, started by
// `mpirun -np N g4 ...`. Built only when CMake finds MPI (G4_HAVE_MPI); otherwise the functions
// below report that MPI is unavailable and g4 runs tensor parallel in-process only.
#pragma once

#include <memory>

#include "base/status.h"
#include "parallel/communicator.h"

namespace g4 {

// True when this process was started by an MPI launcher (mpirun/mpiexec/srun set these
// variables: OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK).
bool LaunchedByMpi();

// MPI_COMM_WORLD as a Communicator. Initializes MPI on the first call (MPI_THREAD_FUNNELED: only
// the thread that runs Forward calls MPI) and finalizes it at process exit.
Result<Communicator*> MpiWorld();

}  // namespace g4
