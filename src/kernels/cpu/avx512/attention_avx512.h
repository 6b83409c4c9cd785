// The AVX-512 attention tiles (attention_avx512.cc), put into a kernel table whose other
// attention entries (the AVX2 ones) they fall back to for the shapes they do not take.
#pragma once

#include "kernels/cpu_kernels.h"

namespace g4 {

void UseAvx512Attention(CpuKernels* table);

}  // namespace g4
