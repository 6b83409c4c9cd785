// The AVX-512 bf16-weight matrix product (bf16_matmul_avx512.cc), put into a kernel table.
#pragma once

#include "kernels/cpu_kernels.h"

namespace g4 {

// `prefetch`: passes of 1-8 x rows prefetch their weights (BatchedPassesPrefetch: Zen 5); elsewhere
// none does, one row included (measured on Zen 4, bf16_matmul_avx512.cc).
void UseAvx512Bf16MatMul(CpuKernels* table, bool prefetch);

}  // namespace g4
