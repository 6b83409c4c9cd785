// The element formats a KV cache stores keys and values in (--kv-type), one head row at a time:
//   f32   4 bytes a value, exact (the default; the engine's results do not change).
//   bf16  2 bytes a value, round to nearest even.
//   q8    blocks of KvQ8Block(head_dim) values (32 on the real models), each stored as that many
//         int8 followed by its float scale: x ~ scale * q, scale = max|x| / 127, q rounded to
//         nearest even. 1.125 bytes a value at blocks of 32.
// A cache row (one position of one layer) is its KV heads' rows back to back, so head g starts
// KvBytes(type, head_dim, g * head_dim) bytes into it. The attention kernels read these formats
// directly (kernels/cpu_kernels.h attn_*_bf16 / attn_*_q8).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace g4 {

enum class KvType : uint8_t { kF32, kBF16, kQ8 };

const char* KvTypeName(KvType type);
// "f32", "bf16" or "q8"; false for anything else.
bool ParseKvType(const std::string& name, KvType* type);

// Values per q8 block for heads of hd values: the largest of 32, 16, 8 that divides hd (hd
// itself if none does), so a block never straddles two heads.
inline int KvQ8Block(int hd) {
  for (int b : {32, 16, 8})
    if (hd % b == 0) return b;
  return hd;
}

// Bytes of n values stored from the start of heads of hd values (n a multiple of the q8 block).
inline size_t KvBytes(KvType type, int hd, int64_t n) {
  switch (type) {
    case KvType::kF32:
      return static_cast<size_t>(n) * 4;
    case KvType::kBF16:
      return static_cast<size_t>(n) * 2;
    case KvType::kQ8:
      return static_cast<size_t>(n) + static_cast<size_t>(n / KvQ8Block(hd)) * sizeof(float);
  }
  return 0;
}

// Writes n values (whole heads of hd) into the format at dst, and reads them back (tests, the
// naive attention). Stored once per token and layer: scalar is enough.
void StoreKv(KvType type, const float* x, int hd, int64_t n, uint8_t* dst);
void LoadKv(KvType type, const uint8_t* src, int hd, int64_t n, float* dst);

}  // namespace g4
