#include "testing/run_g4.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>

namespace g4 {

G4RunResult RunG4(const std::string& args, bool merge_stderr) {
  const char* bin = std::getenv("G4_BINARY_DIR");
  std::string cmd = std::string(bin && *bin ? bin : G4_BINARY_DIR) + "/g4 " + args +
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

}  // namespace g4
