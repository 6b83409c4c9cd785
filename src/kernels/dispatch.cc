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
