// Where the g4 binary is, and the defaults it falls back to when --model or a tokenizer is not
// given: files under assets/ in the source tree the binary was built in.
#pragma once

#include <string>

namespace g4::cli {

// The running binary's absolute path (/proc/self/exe), or "" when it cannot be read.
std::string ThisBinaryPath();

// The default model used when --model is not given: $G4_DEFAULT_MODEL, else assets/models/default
// next to the source tree, else next to the binary.
std::string DefaultModelPath();

// $G4_ASSETS/tokenizer/gemma4.json, else assets/tokenizer/gemma4.json next to the binary's build
// tree (as DefaultModelPath does), else relative to the working directory.
std::string DefaultTokenizerPath();

}  // namespace g4::cli
