#include "testing/paths.h"

#include <cstdlib>

namespace g4 {

std::string SourceDir() {
  const char* s = std::getenv("G4_SOURCE_DIR");
  return s && *s ? s : G4_SOURCE_DIR;
}

std::string AssetsDir() {
  const char* a = std::getenv("G4_ASSETS");
  return a && *a ? a : SourceDir() + "/assets";
}

}  // namespace g4
