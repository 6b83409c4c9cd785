#include "kernels/kv_format.h"

#include <cmath>
#include <cstring>

#include "base/half.h"

namespace g4 {

const char* KvTypeName(KvType type) {
  switch (type) {
    case KvType::kF32:
      return "f32";
    case KvType::kBF16:
      return "bf16";
    case KvType::kQ8:
      return "q8";
  }
  return "?";
}

bool ParseKvType(const std::string& name, KvType* type) {
  for (KvType t : {KvType::kF32, KvType::kBF16, KvType::kQ8})
    if (name == KvTypeName(t)) {
      *type = t;
      return true;
    }
  return false;
}

void StoreKv(KvType type, const float* x, int hd, int64_t n, uint8_t* dst) {
  switch (type) {
    case KvType::kF32:
      std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
      return;
    case KvType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = F32ToBf16(x[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvType::kQ8: {
      const int block = KvQ8Block(hd);
      for (int64_t b = 0; b < n / block; ++b) {
        const float* xb = x + b * block;
        uint8_t* out = dst + b * (block + sizeof(float));
        float max_abs = 0;
        for (int i = 0; i < block; ++i) max_abs = std::fmax(max_abs, std::fabs(xb[i]));
        const float scale = max_abs / 127.0f;
        const float inv = max_abs > 0 ? 127.0f / max_abs : 0.0f;
        for (int i = 0; i < block; ++i)
          out[i] = static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(xb[i] * inv)));
        std::memcpy(out + block, &scale, sizeof(float));
      }
      return;
    }
  }
}

void LoadKv(KvType type, const uint8_t* src, int hd, int64_t n, float* dst) {
  switch (type) {
    case KvType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case KvType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = Bf16ToF32(h);
      }
      return;
    case KvType::kQ8: {
      const int block = KvQ8Block(hd);
      for (int64_t b = 0; b < n / block; ++b) {
        const uint8_t* in = src + b * (block + sizeof(float));
        float scale;
        std::memcpy(&scale, in + block, sizeof(float));
        for (int i = 0; i < block; ++i)
          dst[b * block + i] = scale * static_cast<float>(static_cast<int8_t>(in[i]));
      }
      return;
    }
  }
}

}  // namespace g4
