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
//
// Row groups (WeightLayout::kRowGroups16, for kernels that ask for it; matrices whose rows are a
// multiple of 16): the same bytes per 16 rows, reordered so that one 64-byte vector holds 4
// consecutive columns of each of the 16 rows (row i in bytes 4i..4i+3). A dot-product
// instruction against 4 broadcast activation bytes then sums a whole block per row in one
// 32-bit lane, with no shuffles and one float conversion per 16 rows x 32 columns.
//   Group g (rows 16g..16g+15) keeps the byte range of those rows in both parts of the buffer.
//   kQ8: block b is 512 bytes: step s (columns 32b+4s..+3) at 64s; stored as q + 128 (unsigned).
//   kQ4: block b is 256 bytes: chunk s < 4 at 64s holds step s in its low nibbles and step s+4
//        (columns 32b+16+4s..+3) in its high nibbles.
//   scales: fp16 [group][block][16].
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
constexpr int kRowGroup = 16;

enum class WeightLayout {
  kRows,         // row-major (above): the checkpoint order, what packs store
  kRowGroups16,  // 16 rows interleaved per 4 columns (above), for the SIMD q8/q4 products
};

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
  WeightLayout layout = WeightLayout::kRows;

  bool empty() const { return data == nullptr; }
  int blocks() const { return cols / kQuantBlock; }
  // q8/q4: bytes of quants per row, and the row's quants / scales (row groups: those of the
  // group starting at `row`, a multiple of 16).
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
