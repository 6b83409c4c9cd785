// The float64 reference's two inner loops: widening weight rows from the mapped checkpoint and
// dotting them with the activations. Plain loops with one fixed summation order, compiled twice
// (baseline x86-64 and AVX2) and chosen at run time; both builds give the same bits, so the
// oracle's answer does not depend on the machine it runs on.
#pragma once

#include <cstdint>

#include "io/safetensors.h"

namespace g4::reference {

// Rows [first, first + rows) of a [*, cols] BF16/F16/F32 tensor, widened to T, row after row.
template <class T>
void WidenRows(const TensorView& t, int64_t first, int rows, int cols, T* out);

// out[r] = w[r] . x for the `rows` consecutive rows of w (row stride `cols`). Each product is four
// interleaved partial sums over i mod 4, the leftover elements added to the first, then summed as
// (s0 + s1) + (s2 + s3): a single running sum is latency-bound, and double has accuracy to spare.
template <class T>
void DotRows(const T* w, int rows, int cols, const T* x, T* out);

}  // namespace g4::reference
