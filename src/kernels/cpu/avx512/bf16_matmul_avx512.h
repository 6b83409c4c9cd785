// The AVX-512 bf16-weight matrix product (bf16_matmul_avx512.cc), put into a kernel table.
#pragma once

#include "kernels/cpu_kernels.h"

namespace g4 {

// `prefetch_batch`: passes of 2-8 x rows prefetch their weights as decode's does
// (BatchedPassesPrefetch); without it, one x row over short W rows does not prefetch either.
void UseAvx512Bf16MatMul(CpuKernels* table, bool prefetch_batch);

}  // namespace g4
