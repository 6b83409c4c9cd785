// Where the tests find the source tree and its assets: $G4_SOURCE_DIR (default: the configured
// source directory) and $G4_ASSETS (default: <source>/assets).
#pragma once

#include <string>

namespace g4 {

std::string SourceDir();
std::string AssetsDir();

}  // namespace g4
