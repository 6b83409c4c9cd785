// A weight matrix in the layout the kernels read: row-major [rows, cols], y = W x.
// The engine owns the bytes (copied out of the checkpoint, not mapped: mapped pages get evicted
// on these machines and decode then reads them from disk again).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace g4 {

enum class WeightType {
  kF32,   // float
  kBF16,  // bfloat16, as shipped
  kQ8,    // reserved: 8-bit blocks (performance issue)
  kQ4,    // reserved: 4-bit blocks (performance issue)
};

const char* WeightTypeName(WeightType type);

struct WeightMatrix {
  WeightType type = WeightType::kF32;
  int rows = 0;
  int cols = 0;
  const void* data = nullptr;  // not owned
  size_t bytes = 0;

  bool empty() const { return data == nullptr; }
};

}  // namespace g4
