#include "testing/run_g4.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>

namespace g4 {

namespace {

G4RunResult RunShell(const std::string& launcher, const std::string& args, bool merge_stderr) {
  const char* bin = std::getenv("G4_BINARY_DIR");
  std::string cmd = launcher + std::string(bin && *bin ? bin : G4_BINARY_DIR) + "/g4 " + args +
                    (merge_stderr ? " 2>&1" : " 2>/dev/null");
  G4RunResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace

G4RunResult RunG4(const std::string& args, bool merge_stderr) { return RunShell("", args, merge_stderr); }

std::string MpirunPrefix(int np) {
  // Root needs --allow-run-as-root; two cores need --oversubscribe. Shared-memory transport only;
  // CMA single-copy needs ptrace rights containers often lack. ASan builds: OpenMPI's own
  // allocations at exit are not our leaks.
  return "OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none "
         "OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_mpi_yield_when_idle=1 "
         "ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -np " +
         std::to_string(np) + " ";
}

bool HaveMpirun() { return std::system("command -v mpirun >/dev/null 2>&1") == 0; }

G4RunResult RunG4Mpi(int np, const std::string& args, bool merge_stderr) {
  return RunShell(MpirunPrefix(np), args, merge_stderr);
}

}  // namespace g4
