#include <cstdlib>
#include <cstring>

#include "kernels/cpu_kernels.h"
#include "kernels/weight_matrix.h"

namespace g4 {

const char* WeightTypeName(WeightType type) {
  switch (type) {
    case WeightType::kF32: return "f32";
    case WeightType::kBF16: return "bf16";
    case WeightType::kQ8: return "q8";
    case WeightType::kQ4: return "q4";
  }
  return "?";
}

bool ParseWeightType(const std::string& name, WeightType* type) {
  for (WeightType t : {WeightType::kF32, WeightType::kBF16, WeightType::kQ8, WeightType::kQ4})
    if (name == WeightTypeName(t)) {
      *type = t;
      return true;
    }
  return false;
}

bool WeightTypeFits(WeightType type, int cols) {
  switch (type) {
    case WeightType::kQ8: return cols % kQuantBlock == 0;
    case WeightType::kQ4: return cols % (2 * kQuantBlock) == 0;
    default: return true;
  }
}

size_t WeightBytes(WeightType type, int rows, int cols) {
  const size_t n = static_cast<size_t>(rows) * cols;
  switch (type) {
    case WeightType::kF32: return n * 4;
    case WeightType::kBF16: return n * 2;
    case WeightType::kQ8: return n + n / kQuantBlock * 2;
    case WeightType::kQ4: return n / 2 + n / kQuantBlock * 2;
  }
  return 0;
}

namespace {
const CpuKernels& Detect() {
  const char* force = std::getenv("G4_FORCE_ISA");
  if (force && std::strcmp(force, "generic") == 0) return GenericKernels();
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && Avx2Kernels())
    return *Avx2Kernels();
#endif
  return GenericKernels();
}
}  // namespace

const CpuKernels& ActiveKernels() {
  static const CpuKernels& k = Detect();
  return k;
}

}  // namespace g4
