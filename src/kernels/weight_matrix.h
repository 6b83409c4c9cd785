// A weight matrix in the layout the kernels read: [rows, cols], y = W x.
// The engine owns the bytes (copied out of the checkpoint, not mapped: mapped pages get evicted
// on these machines and decode then reads them from disk again).
//
// Quantized layouts (one buffer: all rows' quants, then all rows' scales):
//   kQ8: blocks of 32 values along a row. quants int8 [rows][cols]; scales fp16 [rows][cols/32].
//        w = d * q, q in [-127, 127].
//   kQ4: blocks of 32 values, two blocks share 32 bytes. quants uint8 [rows][cols/2]; byte j of
//        the k-th 32-byte chunk of a row holds element 64k+j in its low nibble and 64k+32+j in
//        its high nibble, so one AND and one shift unpack two whole blocks in an AVX2 register.
//        scales fp16 [rows][cols/32]. w = d * (q - 8), q in [0, 15].
// q8 needs cols % 32 == 0 and q4 cols % 64 == 0; other matrices stay in their loaded format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace g4 {

enum class WeightType {
  kF32,   // float
  kBF16,  // bfloat16, as shipped
  kQ8,    // 8-bit blocks of 32 with an fp16 scale (8.5 bits per weight)
  kQ4,    // 4-bit blocks of 32 with an fp16 scale (4.5 bits per weight)
};

const char* WeightTypeName(WeightType type);
// "bf16" | "q8" | "q4" | "f32" -> type; false if unknown.
bool ParseWeightType(const std::string& name, WeightType* type);

constexpr int kQuantBlock = 32;

// Whether a [rows, cols] matrix can be stored as `type` (block divisibility).
bool WeightTypeFits(WeightType type, int cols);
// Bytes of a [rows, cols] matrix in `type` (quants + scales for the block formats).
size_t WeightBytes(WeightType type, int rows, int cols);

struct WeightMatrix {
  WeightType type = WeightType::kF32;
  int rows = 0;
  int cols = 0;
  const void* data = nullptr;  // not owned
  size_t bytes = 0;

  bool empty() const { return data == nullptr; }
  int blocks() const { return cols / kQuantBlock; }
  // q8/q4: bytes of quants per row, and the row's quants / scales.
  size_t quant_row_bytes() const {
    return type == WeightType::kQ4 ? static_cast<size_t>(cols) / 2 : static_cast<size_t>(cols);
  }
  const uint8_t* quants(int row) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(row) * quant_row_bytes();
  }
  const uint16_t* scales(int row) const {
    return reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(data) +
                                             static_cast<size_t>(rows) * quant_row_bytes()) +
           static_cast<size_t>(row) * blocks();
  }
};

}  // namespace g4
