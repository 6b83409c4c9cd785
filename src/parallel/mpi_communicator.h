// Tensor parallelism across processes (and hosts) over MPI: one rank per process, started by
// `mpirun -np N g4 ...`. Built only when CMake finds MPI (G4_HAVE_MPI); otherwise the functions
// below report that MPI is unavailable and g4 runs tensor parallel in-process only.
#pragma once

#include <memory>

#include "base/status.h"
#include "model/communicator.h"

namespace g4 {

// True when this process was started by an MPI launcher (mpirun/mpiexec/srun set these
// variables: OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK).
bool LaunchedByMpi();

// MPI_COMM_WORLD as a Communicator. Initializes MPI on the first call (MPI_THREAD_SERIALIZED:
// one thread at a time calls MPI) and finalizes it at process exit.
Result<Communicator*> MpiWorld();

// Ends every rank of the job with `code` (MPI_Abort), for a rank 0 that fails while the others
// may be waiting in a collective for it (a normal exit would wait for them in MPI_Finalize).
// Does nothing outside mpirun.
void AbortMpiWorld(int code);

}  // namespace g4
