#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cpu_kernels.h"
#include "kernels/weight_matrix.h"

namespace g4 {

const char* WeightTypeName(WeightType type) {
  switch (type) {
    case WeightType::kF32:
      return "f32";
    case WeightType::kBF16:
      return "bf16";
    case WeightType::kQ8:
      return "q8";
    case WeightType::kQ4:
      return "q4";
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
    case WeightType::kQ8:
      return cols % kQuantBlock == 0;
    case WeightType::kQ4:
      return cols % (2 * kQuantBlock) == 0;
    default:
      return true;
  }
}

size_t WeightBytes(WeightType type, int rows, int cols) {
  const size_t n = static_cast<size_t>(rows) * cols;
  switch (type) {
    case WeightType::kF32:
      return n * 4;
    case WeightType::kBF16:
      return n * 2;
    case WeightType::kQ8:
      return n + n / kQuantBlock * 2;
    case WeightType::kQ4:
      return n / 2 + n / kQuantBlock * 2;
  }
  return 0;
}

namespace {
bool CpuHasAvx2() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  // (clang's __builtin_cpu_supports has no "f16c"; every AVX2+FMA x86 CPU has F16C.)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool CpuHasAvx512Vnni() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return CpuHasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

bool CpuHasAvx512Bf16() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return CpuHasAvx512Vnni() && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

const CpuKernels& Detect() {
  const char* force = std::getenv("G4_FORCE_ISA");
  const std::vector<const CpuKernels*> usable = UsableSimdKernels();
  if (force && *force) {
    if (std::strcmp(force, "generic") == 0) return GenericKernels();
    for (const CpuKernels* k : usable)
      if (std::strcmp(force, k->name) == 0) return *k;
    // An ISA this CPU lacks (or a typo) falls through to the best one, as without the variable.
  }
  for (auto it = usable.rbegin(); it != usable.rend(); ++it)
    if (!(*it)->opt_in) return **it;
  return GenericKernels();
}
}  // namespace

std::vector<const CpuKernels*> UsableSimdKernels() {
  std::vector<const CpuKernels*> tables;
  if (CpuHasAvx2() && Avx2Kernels()) tables.push_back(Avx2Kernels());
  if (CpuHasAvx512Vnni() && Avx512Kernels()) tables.push_back(Avx512Kernels());
  if (CpuHasAvx512Bf16() && Avx512Bf16Kernels()) tables.push_back(Avx512Bf16Kernels());
  return tables;
}

bool SoftwarePrefetchInPasses() {
#if defined(__x86_64__)
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  const bool amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163;  // "AuthenticAMD"
  if (!amd || !__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  const unsigned base = (eax >> 8) & 0xf, extended = (eax >> 20) & 0xff;
  return base == 0xf && base + extended >= 0x1a;  // Zen 5 and later
#else
  return false;
#endif
}

const CpuKernels& ActiveKernels() {
  static const CpuKernels& k = Detect();
  return k;
}

}  // namespace g4
