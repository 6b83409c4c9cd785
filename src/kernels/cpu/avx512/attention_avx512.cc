// AVX-512 attention tiles (the CpuKernels attn_* entries) over all three cache formats. A decode
// row deep in a long context is bound by these multiply-adds, not by reading the cache: the AVX2
// tiles (4 keys x 2 heads of 8 lanes) load 6 registers per 8 FMAs and ran at ~45% of the FMA
// peak (BM_Attention 512/2048, 48.8 GFLOP/s scores). Here 16 lanes and 32 registers: scores in
// tiles of 2 keys x 8 heads (10 loads per 16 FMAs, each key row read once for 8 heads), values in
// blocks of 16 keys with the outputs in registers across each block (ValuesStretch). The sums are
// the same float products added in another order. Compiled with the AVX-512 -m flags and only
// called after a CPUID check (kernels/dispatch.cc); head dims that are not a multiple of 16 (and q8
// blocks of 8) keep the AVX2 tiles.
#include "kernels/cpu/avx512/attention_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/avx512/lane_sums.h"
#include "kernels/kv_format.h"

namespace g4 {
namespace {

// The scores tiles ask for the key rows this many keys ahead (decode reads the cache from
// memory); the values tiles ask for the next block of kValueBlockKeys.
constexpr int kPrefetchRows = 16;

// 16 consecutive values of a cached K/V head row widened to float (kernels/kv_format.h); `row` is
// the head's first byte in one position's row.
struct F32Kv {
  static constexpr int kPrefetchEvery = 16;  // values per 64-byte line
  static __m512 Load(const uint8_t* row, int d) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + d);
  }
  static int64_t Offset(int d) { return int64_t{4} * d; }
};
struct Bf16Kv {
  static constexpr int kPrefetchEvery = 32;
  static __m512 Load(const uint8_t* row, int d) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + int64_t{2} * d));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static int64_t Offset(int d) { return int64_t{2} * d; }
};
// Blocks of kBlock int8 then their float scale; 16 values never straddle a block (kBlock 16, 32).
template <int kBlock>
struct Q8Kv {
  static_assert(kBlock % 16 == 0);
  static constexpr int kPrefetchEvery = 32;
  static int64_t Offset(int d) { return (d / kBlock) * int64_t{kBlock + 4} + d % kBlock; }
  static __m512 Load(const uint8_t* row, int d) {
    const uint8_t* block = row + (d / kBlock) * (kBlock + 4);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + d % kBlock));
    float scale;
    std::memcpy(&scale, block + kBlock, sizeof scale);
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(scale));
  }
};

template <class Kv, int J, int H>
inline void ScoresTile(const float* q, int64_t q_stride, const uint8_t* k, int64_t k_stride, int hd,
                       float* s, int64_t s_stride) {
  __m512 acc[J][H];
  for (int j = 0; j < J; ++j)
    for (int h = 0; h < H; ++h) acc[j][h] = _mm512_setzero_ps();
  for (int d = 0; d < hd; d += 16) {
    if (d % Kv::kPrefetchEvery == 0)
      for (int j = 0; j < J; ++j)
        _mm_prefetch(
            reinterpret_cast<const char*>(k + (j + kPrefetchRows) * k_stride + Kv::Offset(d)),
            _MM_HINT_T0);
    __m512 kv[J];
    for (int j = 0; j < J; ++j) kv[j] = Kv::Load(k + j * k_stride, d);
    for (int h = 0; h < H; ++h) {
      __m512 qv = _mm512_loadu_ps(q + h * q_stride + d);
      asm("" : "+v"(qv));  // one load per head, not one per FMA (GCC folds it into each)
      for (int j = 0; j < J; ++j) acc[j][h] = _mm512_fmadd_ps(kv[j], qv, acc[j][h]);
    }
  }
  if constexpr (J * H == 16) {
    alignas(64) float sums[16];
    SumEach16(&acc[0][0], sums);
    for (int j = 0; j < J; ++j)
      for (int h = 0; h < H; ++h) s[h * s_stride + j] = sums[j * H + h];
  } else {
    for (int j = 0; j < J; ++j)
      for (int h = 0; h < H; ++h) s[h * s_stride + j] = _mm512_reduce_add_ps(acc[j][h]);
  }
}

// Heads in groups of 8, 4, 2, 1; keys two at a time for 8 heads (16 accumulators), four for
// fewer.
template <class Kv>
void ScoresTiled(const float* q, int nq, int64_t q_stride, const uint8_t* k, int64_t k_stride,
                 int len, int hd, float* s, int64_t s_stride) {
  auto heads = [&]<int H>(int c) {
    constexpr int J = H == 8 ? 2 : 4;
    int j = 0;
    for (; j + J <= len; j += J)
      ScoresTile<Kv, J, H>(q + c * q_stride, q_stride, k + j * k_stride, k_stride, hd,
                           s + c * s_stride + j, s_stride);
    for (; j < len; ++j)
      ScoresTile<Kv, 1, H>(q + c * q_stride, q_stride, k + j * k_stride, k_stride, hd,
                           s + c * s_stride + j, s_stride);
  };
  int c = 0;
  for (; c + 8 <= nq; c += 8) heads.template operator()<8>(c);
  if (c + 4 <= nq) {
    heads.template operator()<4>(c);
    c += 4;
  }
  if (c + 2 <= nq) {
    heads.template operator()<2>(c);
    c += 2;
  }
  if (c < nq) heads.template operator()<1>(c);
}

// Values in blocks of kValueBlockKeys keys: for each stretch of D x 16 output dims, the H heads'
// sums stay in registers while the tile walks the block's keys, each step one load of the key's
// D chunks and a broadcast of each head's weight into D FMAs. The outputs are loaded and stored
// once a block, not once every few keys, and each sum still adds the keys in order (the same
// float operations as one FMA per key and dim). The block's rows (16 x 2 KiB at f32, head dim
// 512) stay in L1 across the stretches.
constexpr int kValueBlockKeys = 16;

template <class Kv, int H, int D>
inline void ValuesStretch(const float* p, int64_t p_stride, const uint8_t* v, int64_t v_stride,
                          int keys, int d0, float* o, int64_t o_stride) {
  __m512 acc[H][D];
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < D; ++c) acc[h][c] = _mm512_loadu_ps(o + h * o_stride + d0 + 16 * c);
  for (int j = 0; j < keys; ++j) {
    // The next block's rows, at the dims this stretch reads: they come back from memory while
    // this block is worked on (decode reads the cache from memory).
    for (int c = 0; c < D; ++c)
      if ((d0 + 16 * c) % Kv::kPrefetchEvery == 0)
        _mm_prefetch(reinterpret_cast<const char*>(v + (j + kValueBlockKeys) * v_stride +
                                                   Kv::Offset(d0 + 16 * c)),
                     _MM_HINT_T0);
    __m512 vj[D];
    for (int c = 0; c < D; ++c) vj[c] = Kv::Load(v + j * v_stride, d0 + 16 * c);
    for (int h = 0; h < H; ++h) {
      __m512 ph = _mm512_set1_ps(p[h * p_stride + j]);
      asm("" : "+v"(ph));  // one broadcast per head and key, as the query loads above
      for (int c = 0; c < D; ++c) acc[h][c] = _mm512_fmadd_ps(ph, vj[c], acc[h][c]);
    }
  }
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < D; ++c) _mm512_storeu_ps(o + h * o_stride + d0 + 16 * c, acc[h][c]);
}

// H heads over one block of keys: stretches of D chunks (H x D = 16 sums in registers), then
// single chunks for a head dim that is not a multiple of D x 16.
template <class Kv, int H>
inline void ValuesBlock(const float* p, int64_t p_stride, const uint8_t* v, int64_t v_stride,
                        int keys, int hd, float* o, int64_t o_stride) {
  constexpr int D = 16 / H;
  int d0 = 0;
  for (; d0 + 16 * D <= hd; d0 += 16 * D)
    ValuesStretch<Kv, H, D>(p, p_stride, v, v_stride, keys, d0, o, o_stride);
  for (; d0 < hd; d0 += 16)
    ValuesStretch<Kv, H, 1>(p, p_stride, v, v_stride, keys, d0, o, o_stride);
}

template <class Kv>
void ValuesTiled(const float* p, int64_t p_stride, int nq, const uint8_t* v, int64_t v_stride,
                 int len, int hd, float* o, int64_t o_stride) {
  for (int j = 0; j < len; j += kValueBlockKeys) {
    const int keys = std::min(kValueBlockKeys, len - j);
    const uint8_t* vb = v + j * v_stride;
    int c = 0;
    for (; c + 8 <= nq; c += 8)
      ValuesBlock<Kv, 8>(p + c * p_stride + j, p_stride, vb, v_stride, keys, hd, o + c * o_stride,
                         o_stride);
    if (c + 4 <= nq) {
      ValuesBlock<Kv, 4>(p + c * p_stride + j, p_stride, vb, v_stride, keys, hd, o + c * o_stride,
                         o_stride);
      c += 4;
    }
    if (c + 2 <= nq) {
      ValuesBlock<Kv, 2>(p + c * p_stride + j, p_stride, vb, v_stride, keys, hd, o + c * o_stride,
                         o_stride);
      c += 2;
    }
    if (c < nq)
      ValuesBlock<Kv, 1>(p + c * p_stride + j, p_stride, vb, v_stride, keys, hd, o + c * o_stride,
                         o_stride);
  }
}

// The AVX2 table's entries, for the shapes these tiles do not take.
const CpuKernels& Fallback() { return *Avx2Kernels(); }

void AttnScores(const float* q, int nq, int64_t q_stride, const float* k, int64_t k_stride, int len,
                int hd, float* s, int64_t s_stride) {
  if (hd % 16 != 0)
    return Fallback().attn_scores(q, nq, q_stride, k, k_stride, len, hd, s, s_stride);
  ScoresTiled<F32Kv>(q, nq, q_stride, reinterpret_cast<const uint8_t*>(k), 4 * k_stride, len, hd, s,
                     s_stride);
}

void AttnValues(const float* p, int64_t p_stride, int nq, const float* v, int64_t v_stride, int len,
                int hd, float* o, int64_t o_stride) {
  if (hd % 16 != 0)
    return Fallback().attn_values(p, p_stride, nq, v, v_stride, len, hd, o, o_stride);
  ValuesTiled<F32Kv>(p, p_stride, nq, reinterpret_cast<const uint8_t*>(v), 4 * v_stride, len, hd, o,
                     o_stride);
}

void AttnScoresBf16(const float* q, int nq, int64_t q_stride, const uint8_t* k, int64_t k_stride,
                    int len, int hd, float* s, int64_t s_stride) {
  if (hd % 16 != 0)
    return Fallback().attn_scores_bf16(q, nq, q_stride, k, k_stride, len, hd, s, s_stride);
  ScoresTiled<Bf16Kv>(q, nq, q_stride, k, k_stride, len, hd, s, s_stride);
}

void AttnValuesBf16(const float* p, int64_t p_stride, int nq, const uint8_t* v, int64_t v_stride,
                    int len, int hd, float* o, int64_t o_stride) {
  if (hd % 16 != 0)
    return Fallback().attn_values_bf16(p, p_stride, nq, v, v_stride, len, hd, o, o_stride);
  ValuesTiled<Bf16Kv>(p, p_stride, nq, v, v_stride, len, hd, o, o_stride);
}

// Runs fn(Q8Kv<block>{}) for the head's q8 block; false for blocks of 8 (left to the AVX2 tiles).
template <class Fn>
bool WithQ8Block(int hd, Fn&& fn) {
  switch (KvQ8Block(hd)) {
    case 32:
      fn(Q8Kv<32>{});
      return true;
    case 16:
      fn(Q8Kv<16>{});
      return true;
    default:
      return false;
  }
}

void AttnScoresQ8(const float* q, int nq, int64_t q_stride, const uint8_t* k, int64_t k_stride,
                  int len, int hd, float* s, int64_t s_stride) {
  if (!WithQ8Block(hd, [&]<class Kv>(Kv) {
        ScoresTiled<Kv>(q, nq, q_stride, k, k_stride, len, hd, s, s_stride);
      }))
    Fallback().attn_scores_q8(q, nq, q_stride, k, k_stride, len, hd, s, s_stride);
}

void AttnValuesQ8(const float* p, int64_t p_stride, int nq, const uint8_t* v, int64_t v_stride,
                  int len, int hd, float* o, int64_t o_stride) {
  if (!WithQ8Block(hd, [&]<class Kv>(Kv) {
        ValuesTiled<Kv>(p, p_stride, nq, v, v_stride, len, hd, o, o_stride);
      }))
    Fallback().attn_values_q8(p, p_stride, nq, v, v_stride, len, hd, o, o_stride);
}

}  // namespace

void UseAvx512Attention(CpuKernels* table) {
  table->attn_scores = AttnScores;
  table->attn_values = AttnValues;
  table->attn_scores_bf16 = AttnScoresBf16;
  table->attn_values_bf16 = AttnValuesBf16;
  table->attn_scores_q8 = AttnScoresQ8;
  table->attn_values_q8 = AttnValuesQ8;
}

}  // namespace g4
