// Attend (kernels/attention.h) against a naive double-precision attention on random inputs:
// causal and sliding (ring caches that wrap), MHA/GQA/MQA grouping and tensor-parallel head
// offsets, prefill runs, batched decode over several caches, and the split-decode path of a lone
// row, each at several thread counts; and the same over bf16 and q8 caches (kernels/kv_format.h),
// whose naive reference reads the values those formats stored.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace g4 {
namespace {

// One sequence's cache slot: position p at (p % capacity) * stride bytes.
struct Slot {
  int64_t capacity = 0, stride = 0;
  std::vector<uint8_t> k, v;
};

Slot RandomSlot(int64_t capacity, int kv_heads, int hd, KvType type, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int kv_dim = kv_heads * hd;
  Slot s{capacity, static_cast<int64_t>(KvBytes(type, hd, kv_dim)), {}, {}};
  s.k.resize(capacity * s.stride);
  s.v.resize(capacity * s.stride);
  std::vector<float> row(kv_dim);
  for (int64_t p = 0; p < capacity; ++p)
    for (std::vector<uint8_t>* kv : {&s.k, &s.v}) {
      for (float& x : row) x = u(rng);
      StoreKv(type, row.data(), hd, kv_dim, kv->data() + p * s.stride);
    }
  return s;
}

// Head g's values at stored position j, as the format holds them.
std::vector<float> StoredHead(const AttentionRow& row, const void* base, int hd, int g, int64_t j) {
  std::vector<float> out(hd);
  const uint8_t* at = static_cast<const uint8_t*>(base) + (j % row.capacity) * row.stride +
                      KvBytes(row.type, hd, static_cast<int64_t>(g) * hd);
  LoadKv(row.type, at, hd, hd, out.data());
  return out;
}

// softmax(q k^T) v in double, position by position, straight from the definition.
std::vector<double> NaiveAttention(const AttentionShape& shape, const AttentionRow& row) {
  const int hd = shape.head_dim;
  std::vector<double> out(static_cast<size_t>(shape.n_heads_q) * hd, 0.0);
  for (int h = 0; h < shape.n_heads_q; ++h) {
    const int g = (shape.q_head_offset + h) / shape.group_size - shape.kv_head_offset;
    std::vector<int64_t> visible;
    for (int64_t j = 0; j <= row.pos; ++j)
      if (shape.window == 0 || row.pos - j < shape.window) visible.push_back(j);
    std::vector<double> score;
    for (int64_t j : visible) {
      const std::vector<float> kj = StoredHead(row, row.k, hd, g, j);
      double s = 0;
      for (int d = 0; d < hd; ++d) s += static_cast<double>(row.q[h * hd + d]) * kj[d];
      score.push_back(s);
    }
    const double m = *std::max_element(score.begin(), score.end());
    double total = 0;
    for (double& s : score) total += (s = std::exp(s - m));
    for (size_t i = 0; i < visible.size(); ++i) {
      const std::vector<float> vj = StoredHead(row, row.v, hd, g, visible[i]);
      for (int d = 0; d < hd; ++d) out[h * hd + d] += score[i] / total * vj[d];
    }
  }
  return out;
}

struct Sequence {
  int64_t first_pos;  // rows at first_pos, first_pos + 1, ...
  int n_rows;
  int64_t capacity;  // ring size; >= first_pos + n_rows for a full layer
};

// Runs Attend over every sequence's rows at once and returns the largest |error| vs the naive
// attention, relative to the largest |output|.
double MaxError(const AttentionShape& shape, const std::vector<Sequence>& seqs, int threads,
                uint64_t seed, KvType type = KvType::kF32, AttentionTiles tiles = {}) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int hd = shape.head_dim, qdim = shape.n_heads_q * hd;
  const int kv_heads = (shape.q_head_offset + shape.n_heads_q - 1) / shape.group_size -
                       shape.kv_head_offset + 1;
  std::vector<Slot> slots;
  int n_rows = 0;
  for (const Sequence& s : seqs) {
    slots.push_back(RandomSlot(s.capacity, kv_heads, hd, type, rng));
    n_rows += s.n_rows;
  }
  std::vector<float> q(static_cast<size_t>(n_rows) * qdim), out(q.size(), NAN);
  for (float& x : q) x = 2.0f * u(rng);  // scores up to ~|q||k|: a peaked softmax as in a model
  std::vector<AttentionRow> rows;
  for (size_t i = 0; i < seqs.size(); ++i)
    for (int r = 0; r < seqs[i].n_rows; ++r) {
      const size_t at = rows.size() * qdim;
      rows.push_back(AttentionRow{q.data() + at, out.data() + at, seqs[i].first_pos + r,
                                  slots[i].k.data(), slots[i].v.data(), slots[i].stride,
                                  slots[i].capacity, type});
    }
  ThreadPool pool(threads);
  AttentionScratch scratch;  // left unreserved: Attend must grow it
  Attend(shape, rows.data(), n_rows, scratch, pool, tiles);
  double err = 0, scale = 0;
  for (int r = 0; r < n_rows; ++r) {
    const std::vector<double> want = NaiveAttention(shape, rows[r]);
    for (int i = 0; i < qdim; ++i) {
      err = std::max(err, std::abs(want[i] - out[static_cast<size_t>(r) * qdim + i]));
      scale = std::max(scale, std::abs(want[i]));
    }
  }
  return err / scale;
}

// Float accumulation over a few hundred positions of head_dim 64..256 measured at ~1e-6 of the
// largest output (SIMD exp within 2e-7); 2e-5 leaves room for other ISAs and longer rows, and
// is far below any scheduling bug (a wrong chunk, head or position moves outputs by ~1e-1).
constexpr double kTolerance = 2e-5;

AttentionShape Shape(int nq, int hd, int group, int window = 0) {
  return AttentionShape{nq, hd, group, 0, 0, window};
}

TEST(Attention, CausalPrefillMatchesNaiveForMhaGqaMqa) {
  for (int threads : {1, 2, 3})
    for (int group : {1, 4, 8}) {
      SCOPED_TRACE(testing::Message() << "threads " << threads << " group " << group);
      // A prefill chunk continuing a cache of 20 positions.
      EXPECT_LT(MaxError(Shape(8, 64, group), {{20, 13, 64}}, threads, group), kTolerance);
    }
}

TEST(Attention, SlidingWindowOverAWrappedRing) {
  // Window 16 and a chunk of 8: the ring holds window + chunk - 1 = 23 positions and wraps.
  for (int threads : {1, 2, 4}) {
    SCOPED_TRACE(testing::Message() << "threads " << threads);
    EXPECT_LT(MaxError(Shape(4, 32, 2, 16), {{50, 8, 23}}, threads, 7), kTolerance);
    EXPECT_LT(MaxError(Shape(4, 32, 2, 16), {{0, 8, 23}}, threads, 8), kTolerance);
  }
}

TEST(Attention, BatchedDecodeOverSeveralCaches) {
  // One row per sequence, each at its own position, full and sliding.
  for (int threads : {1, 2, 5})
    for (int window : {0, 32}) {
      SCOPED_TRACE(testing::Message() << "threads " << threads << " window " << window);
      const int64_t ring = window ? window + 15 : 400;
      EXPECT_LT(MaxError(Shape(8, 128, 8, window), {{3, 1, ring}, {150, 1, ring}, {299, 1, ring}},
                         threads, 11),
                kTolerance);
    }
}

TEST(Attention, SplitDecodeOfALoneRowMergesItsChunks) {
  // A lone decode row is split into position chunks across threads: long contexts (>= 128 per
  // chunk), short ones with one KV head (down to 32 per chunk), and a sliding ring.
  for (int threads : {1, 2, 3, 8})
    for (int64_t pos : {40, 100, 700, 2047}) {
      SCOPED_TRACE(testing::Message() << "threads " << threads << " pos " << pos);
      EXPECT_LT(MaxError(Shape(8, 256, 8), {{pos, 1, 2048}}, threads, pos), kTolerance);
      EXPECT_LT(MaxError(Shape(8, 64, 2), {{pos, 1, 2048}}, threads, pos + 1), kTolerance);
      EXPECT_LT(MaxError(Shape(4, 64, 4, 512), {{pos, 1, 512 + 63}}, threads, pos + 2),
                kTolerance);
    }
}

TEST(Attention, TensorParallelHeadSliceStartingInsideAKvGroup) {
  // A rank holding query heads 2..7 of groups of 4: local heads 0-1 read KV head 0, 2-5 head 1.
  for (int threads : {1, 2}) {
    EXPECT_LT(MaxError(AttentionShape{6, 32, 4, 2, 0, 0}, {{30, 4, 64}}, threads, 3), kTolerance);
    EXPECT_LT(MaxError(AttentionShape{6, 32, 4, 2, 0, 0}, {{300, 1, 512}}, threads, 4), kTolerance);
    // KV heads 2..3 of a rank: offsets on both sides.
    EXPECT_LT(MaxError(AttentionShape{8, 32, 4, 8, 2, 0}, {{30, 4, 64}}, threads, 5), kTolerance);
  }
}

TEST(Attention, CompactCachesMatchNaiveOverTheirStoredValues) {
  // bf16 and q8 keys/values are widened in the kernels; against the values the format stored the
  // float accumulation is as exact as the f32 cache's. Head dims 16 (q8 blocks of 16), 24 (the
  // scalar path: blocks of 8 without the 8-wide tiles), 32, 256; prefill, a wrapped sliding ring,
  // batched decode and split decode.
  for (KvType type : {KvType::kBF16, KvType::kQ8})
    for (int threads : {1, 3}) {
      SCOPED_TRACE(testing::Message() << KvTypeName(type) << " threads " << threads);
      for (int hd : {16, 24, 32, 256})
        EXPECT_LT(MaxError(Shape(8, hd, 4), {{20, 13, 64}}, threads, hd, type), kTolerance) << hd;
      EXPECT_LT(MaxError(Shape(4, 32, 2, 16), {{50, 8, 23}}, threads, 7, type), kTolerance);
      EXPECT_LT(MaxError(Shape(8, 128, 8, 32), {{3, 1, 47}, {150, 1, 47}, {299, 1, 47}}, threads,
                         11, type),
                kTolerance);
      EXPECT_LT(MaxError(Shape(8, 256, 8), {{700, 1, 2048}}, threads, 12, type), kTolerance);
      EXPECT_LT(MaxError(AttentionShape{8, 32, 4, 8, 2, 0}, {{30, 4, 64}}, threads, 5, type),
                kTolerance);
    }
}

TEST(Attention, BlockedPrefillOverManyKeyBlocksMatchesNaive) {
  // A prefill chunk deep in a full-attention cache and one over a wrapped sliding ring, cut into
  // query blocks of 1-32 rows and key blocks of 7-64 positions (7: blocks that straddle the
  // chunk's causal edge and the ring's wrap unevenly), beside a second sequence in the same call.
  for (int threads : {1, 2, 3})
    for (AttentionTiles tiles : {AttentionTiles{4, 7}, AttentionTiles{32, 64}, AttentionTiles{1, 16},
                                 AttentionTiles{5, 300}, AttentionTiles{}}) {
      SCOPED_TRACE(testing::Message() << "threads " << threads << " tiles " << tiles.query_rows
                                      << "x" << tiles.keys);
      EXPECT_LT(MaxError(Shape(8, 64, 8), {{300, 40, 400}, {0, 9, 400}}, threads, 21,
                         KvType::kF32, tiles),
                kTolerance);
      EXPECT_LT(MaxError(Shape(4, 32, 2, 48), {{200, 24, 48 + 23}}, threads, 22, KvType::kF32, tiles),
                kTolerance);
      EXPECT_LT(MaxError(Shape(4, 32, 4), {{100, 17, 200}}, threads, 23, KvType::kQ8, tiles),
                kTolerance);
    }
}

TEST(Attention, BlockedRescalingIsNotANoOp) {
  // Keys whose scores rise block after block force the running max up at every key block, so
  // each block's rescale of the partial output and sum is needed: skipping it (or using the
  // stale max) moves the output far beyond the tolerance.
  const int hd = 16, capacity = 256;
  Slot slot{capacity, static_cast<int64_t>(KvBytes(KvType::kF32, hd, hd)), {}, {}};
  slot.k.resize(capacity * slot.stride);
  slot.v.resize(capacity * slot.stride);
  std::vector<float> q(static_cast<size_t>(8) * hd, 0.0f);
  for (int r = 0; r < 8; ++r) q[r * hd] = 1.0f;
  for (int p = 0; p < capacity; ++p) {
    float* k = reinterpret_cast<float*>(slot.k.data() + p * slot.stride);
    float* v = reinterpret_cast<float*>(slot.v.data() + p * slot.stride);
    for (int d = 0; d < hd; ++d) k[d] = v[d] = 0;
    k[0] = 0.05f * p;            // score grows with the position
    v[1 + p % (hd - 1)] = 1.0f;  // each position writes its own coordinate
  }
  std::vector<float> out(q.size(), NAN);
  std::vector<AttentionRow> rows;
  for (int r = 0; r < 8; ++r)
    rows.push_back(AttentionRow{q.data() + r * hd, out.data() + r * hd, 240 + r, slot.k.data(),
                                slot.v.data(), slot.stride, capacity, KvType::kF32});
  ThreadPool pool(1);
  AttentionScratch scratch;
  Attend(Shape(1, hd, 1), rows.data(), 8, scratch, pool, AttentionTiles{8, 8});
  double err = 0;
  for (int r = 0; r < 8; ++r) {
    const std::vector<double> want = NaiveAttention(Shape(1, hd, 1), rows[r]);
    for (int i = 0; i < hd; ++i) err = std::max(err, std::abs(want[i] - out[r * hd + i]));
  }
  EXPECT_LT(err, kTolerance);
}

// The same row computed as a lone decode row (split over 1-3 threads or not), as one row of a
// prefill / verify block of any size, and as one row of a batch beside another sequence's rows:
// the outputs must be equal to the bit (the order every path computes a row in), over full and
// wrapped sliding caches in every format, one KV head (the split path) and several. A speculative
// verify that rounds differently from the decode it replaces changes greedy output at depth.
TEST(Attention, EveryPathComputesARowTheSameToTheBit) {
  struct Case {
    AttentionShape shape;
    int64_t capacity;
    KvType type;
    AttentionTiles tiles;
  };
  const std::vector<Case> cases = {
      {Shape(8, 64, 8), 700, KvType::kF32, {0, 64}},        // one KV head: the split path
      {Shape(8, 32, 2), 700, KvType::kF32, {0, 48}},        // four runs, chunks of 48
      {Shape(4, 32, 2, 100), 107, KvType::kBF16, {0, 32}},  // a wrapped sliding ring
      {Shape(6, 32, 6), 700, KvType::kQ8, {0, 64}},
      {AttentionShape{6, 32, 4, 2, 0, 0}, 700, KvType::kF32, {0, 40}},  // a TP slice: runs 2 + 4
  };
  const int first = 560, n = 8;  // rows at positions 560..567: many chunks, none at a boundary
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& cs = cases[ci];
    SCOPED_TRACE(testing::Message() << "case " << ci);
    std::mt19937 rng(100 + ci);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const int hd = cs.shape.head_dim, qdim = cs.shape.n_heads_q * hd;
    const int kv_heads = (cs.shape.q_head_offset + cs.shape.n_heads_q - 1) / cs.shape.group_size -
                         cs.shape.kv_head_offset + 1;
    Slot slot = RandomSlot(cs.capacity, kv_heads, hd, cs.type, rng);
    Slot other = RandomSlot(cs.capacity, kv_heads, hd, cs.type, rng);
    std::vector<float> q(static_cast<size_t>(n) * qdim), other_q(3 * qdim);
    for (float& x : q) x = 2.0f * u(rng);
    for (float& x : other_q) x = 2.0f * u(rng);
    auto row = [&](int r, float* out) {
      const float* q_r = q.data() + static_cast<size_t>(r) * qdim;
      return AttentionRow{q_r,           out,         first + r,     slot.k.data(),
                          slot.v.data(), slot.stride, slot.capacity, cs.type};
    };
    // Reference: each row alone on one thread.
    std::vector<float> want(q.size());
    {
      ThreadPool pool(1);
      AttentionScratch scratch;
      for (int r = 0; r < n; ++r) {
        AttentionRow one = row(r, want.data() + static_cast<size_t>(r) * qdim);
        Attend(cs.shape, &one, 1, scratch, pool, cs.tiles);
      }
    }
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      AttentionScratch scratch;
      std::vector<float> got(q.size(), NAN);
      for (int r = 0; r < n; ++r) {  // lone rows
        AttentionRow one = row(r, got.data() + static_cast<size_t>(r) * qdim);
        Attend(cs.shape, &one, 1, scratch, pool, cs.tiles);
      }
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << threads << " lone";
      for (int query_rows : {0, 1, 3, 8}) {  // one block of the 8 rows, cut in query blocks
        std::fill(got.begin(), got.end(), NAN);
        std::vector<AttentionRow> rows;
        for (int r = 0; r < n; ++r)
          rows.push_back(row(r, got.data() + static_cast<size_t>(r) * qdim));
        Attend(cs.shape, rows.data(), n, scratch, pool, {query_rows, cs.tiles.keys});
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
            << threads << " block of " << query_rows;
      }
      // A batch: the last 3 rows of the sequence between rows of another sequence.
      std::fill(got.begin(), got.end(), NAN);
      std::vector<float> other_out(other_q.size());
      std::vector<AttentionRow> batch;
      for (int i = 0; i < 3; ++i) {
        batch.push_back(AttentionRow{other_q.data() + i * qdim, other_out.data() + i * qdim,
                                     300 + 50 * i, other.k.data(), other.v.data(), other.stride,
                                     other.capacity, cs.type});
        batch.push_back(row(n - 3 + i, got.data() + static_cast<size_t>(n - 3 + i) * qdim));
      }
      Attend(cs.shape, batch.data(), static_cast<int>(batch.size()), scratch, pool, cs.tiles);
      EXPECT_EQ(
          0, std::memcmp(got.data() + (n - 3) * qdim, want.data() + (n - 3) * qdim, 3 * qdim * 4))
          << threads << " batch";
    }
  }
}

}  // namespace
}  // namespace g4
