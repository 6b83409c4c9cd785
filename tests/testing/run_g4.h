// Runs the built g4 binary the way a user does, for end-to-end tests.
#pragma once

#include <string>

#include "testing/paths.h"  // AssetsDir(), SourceDir(): what the runs are given

namespace g4 {

struct G4RunResult {
  int exit_code = -1;
  std::string output;  // stdout, then stderr when merge_stderr
};

// Runs `$G4_BINARY_DIR/g4 ARGS` through the shell.
G4RunResult RunG4(const std::string& args, bool merge_stderr = true);

// `mpirun -np NP ` with the settings a container with few cores needs, as a command prefix.
std::string MpirunPrefix(int np);
// True when mpirun is on the PATH.
bool HaveMpirun();
// Runs `mpirun -np NP $G4_BINARY_DIR/g4 ARGS` (MpirunPrefix) through the shell.
G4RunResult RunG4Mpi(int np, const std::string& args, bool merge_stderr = true);

}  // namespace g4
