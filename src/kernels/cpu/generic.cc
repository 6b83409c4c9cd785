// Portable scalar kernels: the oracle every SIMD table is tested against.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/half.h"
#include "kernels/cpu_kernels.h"
#include "kernels/kv_format.h"
#include "kernels/ops.h"

namespace g4 {
namespace {

float DotF32(const float* a, const float* b, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

float DotBf16F32(const uint16_t* w, const float* x, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += Bf16ToF32(w[i]) * x[i];
  return s;
}

void Bf16ToF32Row(const uint16_t* src, float* dst, int n) {
  for (int i = 0; i < n; ++i) dst[i] = Bf16ToF32(src[i]);
}

void AxpyF32(float a, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

double SumSquares(const float* x, int n) {
  // Four independent chains: one chain of dependent double adds is latency-bound.
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += static_cast<double>(x[i]) * x[i];
    s1 += static_cast<double>(x[i + 1]) * x[i + 1];
    s2 += static_cast<double>(x[i + 2]) * x[i + 2];
    s3 += static_cast<double>(x[i + 3]) * x[i + 3];
  }
  for (; i < n; ++i) s0 += static_cast<double>(x[i]) * x[i];
  return (s0 + s1) + (s2 + s3);
}

int64_t ArgMaxF32(const float* x, int64_t n) {
  int64_t best = 0;
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i)
    if (x[i] > m) {  // false for NaN
      m = x[i];
      best = i;
    }
  return best;
}

void QuantizeRowQ8(const float* x, int cols, int8_t* q, float* scale, float* corr) {
  for (int b = 0; b < cols / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    float amax = 0;
    for (int i = 0; i < kQuantBlock; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int i = 0; i < kQuantBlock; ++i) {
      const int v = static_cast<int>(std::nearbyint(xb[i] * inv));
      q[b * kQuantBlock + i] = static_cast<int8_t>(v);
      sum += v;
    }
    scale[b] = amax / 127.0f;
    corr[b] = -8.0f * scale[b] * static_cast<float>(sum);
  }
}

void MatMulQ8(const WeightMatrix& w, int r0, int r1, const QuantizedRows& x, float* y,
              int64_t ldy) {
  const int nb = w.blocks();
  for (int r = r0; r < r1; ++r) {
    const int8_t* wq = reinterpret_cast<const int8_t*>(w.quants(r));
    const uint16_t* wd = w.scales(r);
    for (int i = 0; i < x.n; ++i) {
      const int8_t* aq = x.q + static_cast<int64_t>(i) * x.cols;
      const float* as = x.scale + static_cast<int64_t>(i) * nb;
      float s = 0;
      for (int b = 0; b < nb; ++b) {
        int dot = 0;
        for (int j = 0; j < kQuantBlock; ++j)
          dot += wq[b * kQuantBlock + j] * aq[b * kQuantBlock + j];
        s += F16ToF32(wd[b]) * as[b] * static_cast<float>(dot);
      }
      y[i * ldy + r] = s;
    }
  }
}

void MatMulQ4(const WeightMatrix& w, int r0, int r1, const QuantizedRows& x, float* y,
              int64_t ldy) {
  const int nb = w.blocks();
  for (int r = r0; r < r1; ++r) {
    const uint8_t* wq = w.quants(r);
    const uint16_t* wd = w.scales(r);
    for (int i = 0; i < x.n; ++i) {
      const int8_t* aq = x.q + static_cast<int64_t>(i) * x.cols;
      const float* as = x.scale + static_cast<int64_t>(i) * nb;
      const float* ac = x.corr + static_cast<int64_t>(i) * nb;
      float s = 0;
      for (int b = 0; b < nb; ++b) {
        // Block b lives in chunk b/2: low nibbles for even b, high nibbles for odd b.
        const uint8_t* chunk = wq + (b / 2) * 32;
        const int shift = (b % 2) * 4;
        int dot = 0;
        for (int j = 0; j < kQuantBlock; ++j)
          dot += ((chunk[j] >> shift) & 15) * aq[b * kQuantBlock + j];
        const float d = F16ToF32(wd[b]);
        s += d * as[b] * static_cast<float>(dot) + d * ac[b];
      }
      y[i * ldy + r] = s;
    }
  }
}

void MatMulBf16(const WeightMatrix& w, int r0, int r1, const float* x, int n, float* y,
                int64_t ldy) {
  const uint16_t* wd = static_cast<const uint16_t*>(w.data);
  for (int r = r0; r < r1; ++r)
    for (int i = 0; i < n; ++i)
      y[i * ldy + r] = DotBf16F32(wd + static_cast<int64_t>(r) * w.cols,
                                  x + static_cast<int64_t>(i) * w.cols, w.cols);
}

// Round to nearest even without a libm call (nearbyintf is one on baseline x86-64): exact for
// |x| < 2^22, far beyond the +-127 levels used here.
// Without -ffast-math the compiler may not fold (x + m) - m.
inline float RoundEven(float x) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (x + kMagic) - kMagic;
}

void QuantizeRowQ8W(const float* x, int cols, int8_t* q, uint16_t* scales) {
  for (int b = 0; b < cols / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    float amax = 0;
    for (int i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
    scales[b] = F32ToF16(amax / 127.0f);
    const float d = F16ToF32(scales[b]);
    const float inv = d > 0 ? 1.0f / d : 0.0f;
    for (int i = 0; i < kQuantBlock; ++i)
      q[b * kQuantBlock + i] =
          static_cast<int8_t>(std::clamp(RoundEven(xb[i] * inv), -127.0f, 127.0f));
  }
}

// q4 block: plain absmax scaling (d = -m/8) wastes most of the 16 levels on Gaussian weights, so
// try a range of grid widths and keep the least-squares optimum: for each candidate the ints are
// fixed by rounding, then the scale is refit as d = sum(w q) / sum(q^2), and the candidate with the
// smallest squared error wins (as llama.cpp's make_qx_quants does for its k-quants).
void QuantizeBlockQ4(const float* x, float* best_d, int* best_q) {
  float m = 0;
  for (int i = 0; i < kQuantBlock; ++i)
    if (std::fabs(x[i]) > std::fabs(m)) m = x[i];
  if (m == 0) {
    *best_d = 0;
    for (int i = 0; i < kQuantBlock; ++i) best_q[i] = 0;
    return;
  }
  float best_err = INFINITY;
  *best_d = 0;
  std::fill(best_q, best_q + kQuantBlock, 0);
  int q[kQuantBlock];
  for (int step = -4; step <= 8; ++step) {
    const float inv = (-8.0f + 0.5f * step) / m;  // m maps to -8 + step/2 levels
    double wq = 0, qq = 0;
    for (int i = 0; i < kQuantBlock; ++i) {
      q[i] = static_cast<int>(std::clamp(RoundEven(x[i] * inv), -8.0f, 7.0f));
      wq += static_cast<double>(x[i]) * q[i];
      qq += static_cast<double>(q[i]) * q[i];
    }
    if (qq == 0) continue;
    // With the least-squares d = wq/qq the squared error is sum(x^2) - wq^2/qq: maximise wq^2/qq.
    const float score = static_cast<float>(wq * wq / qq);
    if (-score < best_err) {
      best_err = -score;
      *best_d = static_cast<float>(wq / qq);  // rounded to fp16 by the caller
      std::copy(q, q + kQuantBlock, best_q);
    }
  }
}

void QuantizeRowQ4W(const float* x, int cols, uint8_t* q, uint16_t* scales) {
  std::memset(q, 0, cols / 2);
  for (int b = 0; b < cols / kQuantBlock; ++b) {
    float d = 0;
    int qi[kQuantBlock] = {};
    QuantizeBlockQ4(x + b * kQuantBlock, &d, qi);
    scales[b] = F32ToF16(d);
    uint8_t* chunk = q + (b / 2) * 32;
    const int shift = (b % 2) * 4;
    for (int i = 0; i < kQuantBlock; ++i) chunk[i] |= static_cast<uint8_t>((qi[i] + 8) << shift);
  }
}

void GeluTanhMulRow(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = GeluTanh(gate[i]) * up[i];
}

void AttnScores(const float* q, int nq, int64_t q_stride, const float* k, int64_t k_stride, int len,
                int hd, float* s, int64_t s_stride) {
  for (int c = 0; c < nq; ++c)
    for (int j = 0; j < len; ++j)
      s[c * s_stride + j] = DotF32(q + c * q_stride, k + j * k_stride, hd);
}

void AttnValues(const float* p, int64_t p_stride, int nq, const float* v, int64_t v_stride, int len,
                int hd, float* o, int64_t o_stride) {
  for (int c = 0; c < nq; ++c)
    for (int j = 0; j < len; ++j)
      AxpyF32(p[c * p_stride + j], v + j * v_stride, o + c * o_stride, hd);
}

// Compact caches: element by element, widened as read (kernels/kv_format.h).
template <KvType kType>
float KvAt(const uint8_t* row, int hd, int d) {
  if constexpr (kType == KvType::kBF16) {
    uint16_t h;
    std::memcpy(&h, row + 2 * d, 2);
    return Bf16ToF32(h);
  } else {
    const int block = KvQ8Block(hd);
    const uint8_t* b = row + static_cast<size_t>(d / block) * (block + sizeof(float));
    float scale;
    std::memcpy(&scale, b + block, sizeof(float));
    return scale * static_cast<float>(static_cast<int8_t>(b[d % block]));
  }
}

template <KvType kType>
void AttnScoresKv(const float* q, int nq, int64_t q_stride, const uint8_t* k, int64_t k_stride,
                  int len, int hd, float* s, int64_t s_stride) {
  for (int c = 0; c < nq; ++c)
    for (int j = 0; j < len; ++j) {
      float sum = 0;
      for (int d = 0; d < hd; ++d) sum += q[c * q_stride + d] * KvAt<kType>(k + j * k_stride, hd, d);
      s[c * s_stride + j] = sum;
    }
}

template <KvType kType>
void AttnValuesKv(const float* p, int64_t p_stride, int nq, const uint8_t* v, int64_t v_stride,
                  int len, int hd, float* o, int64_t o_stride) {
  for (int c = 0; c < nq; ++c)
    for (int j = 0; j < len; ++j)
      for (int d = 0; d < hd; ++d)
        o[c * o_stride + d] += p[c * p_stride + j] * KvAt<kType>(v + j * v_stride, hd, d);
}

double ExpSum(float* x, int n, float shift) {
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

}  // namespace

const CpuKernels& GenericKernels() {
  static const CpuKernels k{
      .name = "generic",
      .dot_f32 = DotF32,
      .dot_bf16_f32 = DotBf16F32,
      .bf16_to_f32 = Bf16ToF32Row,
      .axpy_f32 = AxpyF32,
      .sum_squares = SumSquares,
      .argmax = ArgMaxF32,
      .quantize_row_q8 = QuantizeRowQ8,
      .quantize_row_q8w = QuantizeRowQ8W,
      .quantize_row_q4w = QuantizeRowQ4W,
      .matmul_q8 = MatMulQ8,
      .matmul_q4 = MatMulQ4,
      .matmul_bf16 = MatMulBf16,
      .gelu_tanh_mul = GeluTanhMulRow,
      .exp_sum = ExpSum,
      .attn_scores = AttnScores,
      .attn_values = AttnValues,
      .attn_scores_bf16 = AttnScoresKv<KvType::kBF16>,
      .attn_values_bf16 = AttnValuesKv<KvType::kBF16>,
      .attn_scores_q8 = AttnScoresKv<KvType::kQ8>,
      .attn_values_q8 = AttnValuesKv<KvType::kQ8>,
      .q8_layout = WeightLayout::kRows,
      .q4_layout = WeightLayout::kRows,
  };
  return k;
}

}  // namespace g4
