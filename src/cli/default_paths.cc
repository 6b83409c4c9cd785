#include "cli/default_paths.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <optional>

#include "base/mapped_file.h"

namespace g4::cli {
namespace {

// The nearest of the binary's three enclosing folders in which `relative` exists (<repo> for
// <repo>/build/g4 and "/assets/..."), or nothing.
std::optional<std::string> FolderAboveBinaryWith(const std::string& relative) {
  std::string dir = ThisBinaryPath();
  if (dir.empty()) return std::nullopt;
  for (int up = 0; up < 3; ++up) {
    const auto slash = dir.rfind('/');
    if (slash == std::string::npos) break;
    dir = dir.substr(0, slash);
    if (FileExists(dir + relative)) return dir;
  }
  return std::nullopt;
}

}  // namespace

std::string ThisBinaryPath() {
  char exe[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "";
  return std::string(exe, static_cast<size_t>(n));
}

std::string DefaultModelPath() {
  if (const char* env = std::getenv("G4_DEFAULT_MODEL"); env && *env) return env;
  const std::string rel = "/assets/models/default";
  if (auto root = FolderAboveBinaryWith(rel + "/config.json")) return *root + rel;
  return "assets/models/default";
}

std::string DefaultTokenizerPath() {
  const std::string rel = "/tokenizer/gemma4.json";
  if (const char* env = std::getenv("G4_ASSETS"); env && *env) return env + rel;
  if (auto root = FolderAboveBinaryWith("/assets" + rel)) return *root + "/assets" + rel;
  return "assets" + rel;
}

}  // namespace g4::cli
