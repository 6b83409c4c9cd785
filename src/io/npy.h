// NumPy .npy (format 1.0) writer/reader for float32 arrays.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace g4 {

Status WriteNpyF32(const std::string& path, const std::vector<int64_t>& shape, const float* data);

struct NpyF32 {
  std::vector<int64_t> shape;
  std::vector<float> data;
};
Result<NpyF32> ReadNpyF32(const std::string& path);

}  // namespace g4
