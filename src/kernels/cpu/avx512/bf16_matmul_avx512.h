// The AVX-512 bf16-weight matrix product (bf16_matmul_avx512.cc), put into a kernel table.
#pragma once

#include "kernels/cpu_kernels.h"

namespace g4 {

// `prefetch_batch`: passes of 2-8 x rows prefetch their weights as decode's does
// (SoftwarePrefetchInPasses); without it, passes over short W rows take at most 4 W rows a tile
// and one x row over them does not prefetch either.
void UseAvx512Bf16MatMul(CpuKernels* table, bool prefetch_batch);

}  // namespace g4
