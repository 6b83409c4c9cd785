// The rank plan on the real E2B / E4B / 12B configs: every layer kind, every supported rank
// count, and the one invariant that matters: each rank's query head reads the KV head that the
// unsharded model's query head reads.
#include "model/rank_plan.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/arch/gemma4.h"
#include "testing/real_configs.h"

namespace g4 {
namespace {

using json = nlohmann::json;

ModelPlan Plan(const json& text) { return PlanOfConfig(OuterConfig(text)); }

std::vector<ModelPlan> Ranks(const ModelPlan& full, int tp) {
  std::vector<ModelPlan> out;
  for (int r = 0; r < tp; ++r) {
    auto p = BuildRankPlan(full, r, tp);
    EXPECT_TRUE(p.ok()) << p.status().message();
    if (p.ok()) out.push_back(*p);
  }
  return out;
}

// The local KV head that forward.cc's attention reads for local query head h.
int LocalKv(const LayerPlan& l, int h) {
  return (l.q_head_offset + h) / l.group_size - l.kv_head_offset;
}

// Every query head of the full model is on exactly one rank and reads, there, the KV head the
// unsharded model gives it; KV heads are held where needed; MLP rows partition the width.
void CheckInvariants(const ModelPlan& full, int tp) {
  SCOPED_TRACE("tp " + std::to_string(tp));
  const std::vector<ModelPlan> ranks = Ranks(full, tp);
  ASSERT_EQ(static_cast<int>(ranks.size()), tp);
  for (int i = 0; i < full.n_layers(); ++i) {
    SCOPED_TRACE("layer " + std::to_string(i));
    const LayerPlan& f = full.layers[i];
    std::vector<int> q_seen(f.n_heads_q, 0), mlp_seen(f.mlp_width, 0);
    for (int r = 0; r < tp; ++r) {
      const LayerPlan& l = ranks[r].layers[i];
      EXPECT_EQ(ranks[r].tp_rank, r);
      EXPECT_EQ(l.head_dim, f.head_dim);
      EXPECT_EQ(l.group_size, f.group_size);  // never divided (the naive split's bug)
      EXPECT_EQ(l.kv_source, f.kv_source);
      EXPECT_EQ(l.kv_slot, f.kv_slot);
      EXPECT_EQ(l.ple_offset, f.ple_offset);
      EXPECT_EQ(l.n_heads_q * tp, f.n_heads_q);
      const bool sharded = f.n_heads_kv % tp == 0;
      EXPECT_EQ(l.n_heads_kv, sharded ? f.n_heads_kv / tp : f.n_heads_kv);
      EXPECT_EQ(KvReplicated(f, l), !sharded || tp == 1);
      if (!sharded) {
        EXPECT_EQ(l.kv_head_offset, 0);
      }
      for (int h = 0; h < l.n_heads_q; ++h) {
        const int global_q = l.q_head_offset + h;
        ASSERT_LT(global_q, f.n_heads_q);
        q_seen[global_q]++;
        const int local_kv = LocalKv(l, h);
        ASSERT_GE(local_kv, 0);
        ASSERT_LT(local_kv, l.n_heads_kv);
        EXPECT_EQ(l.kv_head_offset + local_kv, global_q / f.group_size)
            << "rank " << r << " head " << h;
      }
      for (int c = 0; c < l.mlp_width; ++c) mlp_seen[l.mlp_offset + c]++;
    }
    for (int c : q_seen) EXPECT_EQ(c, 1);
    for (int c : mlp_seen) EXPECT_EQ(c, 1);
  }
  // The LM head's vocabulary blocks partition the vocabulary.
  int next = 0;
  for (const ModelPlan& p : ranks) {
    EXPECT_EQ(p.lm_head_begin(), next);
    next = p.lm_head_end();
  }
  EXPECT_EQ(next, full.vocab);
}

TEST(RankPlan, InvariantsOnEveryModelAndRankCount) {
  for (const json& text : {E2BTextConfig(), E4BTextConfig(), B12TextConfig()}) {
    const ModelPlan full = Plan(text);
    for (int tp : SupportedTensorParallel(full)) CheckInvariants(full, tp);
  }
}

TEST(RankPlan, SupportedRankCounts) {
  EXPECT_EQ(SupportedTensorParallel(Plan(E2BTextConfig())), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(SupportedTensorParallel(Plan(E4BTextConfig())), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(SupportedTensorParallel(Plan(B12TextConfig())), (std::vector<int>{1, 2, 4, 8, 16}));
}

// E2B: MQA (one KV head) everywhere, so K/V are replicated on every layer, owners and shared.
TEST(RankPlan, E2BReplicatesTheSingleKvHead) {
  const ModelPlan full = Plan(E2BTextConfig());
  for (int r = 0; r < 2; ++r) {
    auto p = BuildRankPlan(full, r, 2);
    ASSERT_TRUE(p.ok());
    for (const LayerPlan& l : p->layers) {
      SCOPED_TRACE(l.index);
      EXPECT_EQ(l.n_heads_q, 4);
      EXPECT_EQ(l.q_head_offset, 4 * r);
      EXPECT_EQ(l.n_heads_kv, 1);
      EXPECT_EQ(l.kv_head_offset, 0);
      EXPECT_EQ(l.group_size, 8);
      EXPECT_EQ(l.mlp_width, l.index >= 15 ? 6144 : 3072);  // double-wide shared layers
      EXPECT_EQ(l.mlp_offset, r * l.mlp_width);
    }
    EXPECT_EQ(p->lm_head_begin(), r * 131072);
    EXPECT_EQ(p->lm_head_end(), (r + 1) * 131072);
  }
}

// E4B: 8 q / 2 kv. TP=2 shards K/V (one KV head per rank, group_size stays 4); TP=4 cannot
// shard two KV heads, so it replicates them and each rank's 2 query heads pick theirs.
TEST(RankPlan, E4BShardsAtTwoAndReplicatesAtFour) {
  const ModelPlan full = Plan(E4BTextConfig());
  for (int r = 0; r < 2; ++r) {
    auto p = BuildRankPlan(full, r, 2);
    ASSERT_TRUE(p.ok());
    for (const LayerPlan& l : p->layers) {
      EXPECT_EQ(l.n_heads_q, 4);
      EXPECT_EQ(l.n_heads_kv, 1);
      EXPECT_EQ(l.kv_head_offset, r);
      EXPECT_EQ(l.group_size, 4);
      for (int h = 0; h < 4; ++h) EXPECT_EQ(LocalKv(l, h), 0);
    }
  }
  for (int r = 0; r < 4; ++r) {
    auto p = BuildRankPlan(full, r, 4);
    ASSERT_TRUE(p.ok());
    for (const LayerPlan& l : p->layers) {
      EXPECT_EQ(l.n_heads_q, 2);
      EXPECT_EQ(l.n_heads_kv, 2);
      EXPECT_EQ(l.kv_head_offset, 0);
      for (int h = 0; h < 2; ++h) EXPECT_EQ(LocalKv(l, h), r / 2);
    }
  }
}

// 12B: sliding layers (8 KV heads) shard, global layers (one K=V head) replicate, in one model.
TEST(RankPlan, B12ShardsSlidingAndReplicatesGlobal) {
  const ModelPlan full = Plan(B12TextConfig());
  int sharded = 0, replicated = 0;
  for (int r = 0; r < 2; ++r) {
    auto p = BuildRankPlan(full, r, 2);
    ASSERT_TRUE(p.ok());
    for (const LayerPlan& l : p->layers) {
      SCOPED_TRACE(l.index);
      EXPECT_EQ(l.n_heads_q, 8);
      EXPECT_EQ(l.q_head_offset, 8 * r);
      if (l.is_sliding()) {
        ++sharded;
        EXPECT_EQ(l.n_heads_kv, 4);
        EXPECT_EQ(l.kv_head_offset, 4 * r);
        EXPECT_EQ(l.group_size, 2);
      } else {
        ++replicated;
        EXPECT_TRUE(l.k_eq_v);
        EXPECT_EQ(l.n_heads_kv, 1);
        EXPECT_EQ(l.kv_head_offset, 0);
        EXPECT_EQ(l.group_size, 16);
        for (int h = 0; h < 8; ++h) EXPECT_EQ(LocalKv(l, h), 0);
      }
      EXPECT_EQ(l.mlp_width, 7680);
    }
  }
  EXPECT_EQ(sharded, 2 * 40);
  EXPECT_EQ(replicated, 2 * 8);
}

// The naive split (group count divided by tp too) maps query heads to the wrong KV heads: on
// E4B TP=2 with K/V sharded, local heads 2 and 3 would read a KV head the rank does not hold.
TEST(RankPlan, NaiveGroupDivisionIsWrong) {
  const ModelPlan full = Plan(E4BTextConfig());
  auto p = BuildRankPlan(full, 0, 2);
  ASSERT_TRUE(p.ok());
  const LayerPlan& l = p->layers[0];
  const int naive_group = l.group_size / 2;
  int wrong = 0;
  for (int h = 0; h < l.n_heads_q; ++h) wrong += (h / naive_group) != LocalKv(l, h);
  EXPECT_EQ(wrong, 2);
}

TEST(RankPlan, UnsupportedRankCountsSayWhy) {
  const ModelPlan e2b = Plan(E2BTextConfig());
  Status st = CheckTensorParallel(e2b, 3);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("8 query heads"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("supports --tp 1, 2, 4, 8"), std::string::npos) << st.message();
  EXPECT_FALSE(BuildRankPlan(e2b, 0, 16).ok());
  EXPECT_FALSE(CheckTensorParallel(e2b, 0).ok());
  EXPECT_FALSE(BuildRankPlan(e2b, 2, 2).ok());
  st = CheckTensorParallel(Plan(B12TextConfig()), 32);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("16 query heads"), std::string::npos) << st.message();
}

TEST(RankPlan, LmHeadOnRankZero) {
  const ModelPlan full = Plan(E2BTextConfig());
  auto r0 = BuildRankPlan(full, 0, 2, {.lm_head = LmHeadPlacement::kRank0});
  auto r1 = BuildRankPlan(full, 1, 2, {.lm_head = LmHeadPlacement::kRank0});
  ASSERT_TRUE(r0.ok() && r1.ok());
  EXPECT_EQ(r0->lm_head_end() - r0->lm_head_begin(), full.vocab);
  EXPECT_EQ(r1->lm_head_end() - r1->lm_head_begin(), 0);
}

// Capacity: the split parts halve, the replicated parts (PLE block, norms, replicated K/V) do
// not, and the 12B's per-rank KV per token is its sharded sliding heads plus the whole global head.
TEST(RankPlan, MemoryPerRank) {
  const ModelPlan full = Plan(B12TextConfig());
  const RankMemory one = EstimateRankMemory(full);
  auto r0 = BuildRankPlan(full, 0, 2);
  ASSERT_TRUE(r0.ok());
  const RankMemory half = EstimateRankMemory(*r0);
  // 12B K=V global layers have no v_proj; everything else in the body splits except 8 global
  // layers' k_proj (replicated): 8 * 512 * 3840 bf16.
  const int64_t global_k = 8LL * 512 * 3840 * 2;
  EXPECT_EQ(2 * half.matrix_bytes, one.matrix_bytes + global_k);
  // KV per token: 40 sliding layers * 2 * (4 heads * 256) * 4 B + 8 global * 2 * 512 * 4 B.
  EXPECT_EQ(half.kv_bytes_per_token, 40LL * 2 * 1024 * 4 + 8LL * 2 * 512 * 4);
  EXPECT_EQ(one.kv_bytes_per_token, 40LL * 2 * 2048 * 4 + 8LL * 2 * 512 * 4);
}

}  // namespace
}  // namespace g4
