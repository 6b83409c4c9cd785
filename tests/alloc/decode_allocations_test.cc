// The decode path allocates nothing per token. This binary replaces the global operator new and
// counts the calls made while a test has counting switched on (all threads: the thread pool's
// workers count too). It is its own executable, not part of g4_tests, so that the replacement
// does not take over allocation (and the sanitizers' new/delete checks) for every other test.
//
// Each test warms up (prefill, first decode steps: buffers reach their size), then counts the
// allocations of N further decode steps, which must be zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "model/forward.h"
#include "model/loader.h"
#include "model/kv_cache.h"
#include "parallel/tensor_parallel.h"
#include "runtime/draft_model_drafter.h"
#include "runtime/generate.h"
#include "runtime/ngram_drafter.h"
#include "runtime/mtp_drafter.h"
#include "model/synth_assistant.h"
#include "model/assistant.h"
#include "runtime/speculative.h"
#include "testing/checkpoints.h"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};

void* Allocate(size_t n, size_t alignment) {
  if (g_counting.load(std::memory_order_relaxed))
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = nullptr;
  if (alignment <= alignof(std::max_align_t)) {
    p = std::malloc(n ? n : 1);
  } else if (posix_memalign(&p, alignment, n ? n : 1) != 0) {
    p = nullptr;
  }
  return p;
}

// Counts the allocations between construction and Stop() (or destruction).
class AllocationCounter {
 public:
  AllocationCounter() {
    start_ = g_allocations.load();
    g_counting.store(true);
  }
  ~AllocationCounter() { Stop(); }
  int64_t Stop() {
    if (g_counting.exchange(false)) count_ = g_allocations.load() - start_;
    return count_;
  }

 private:
  int64_t start_ = 0, count_ = 0;
};

}  // namespace

// GCC sees delete's free() paired with new and warns: here that pairing is the point.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(size_t n) {
  if (void* p = Allocate(n, 0)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, std::align_val_t a) {
  if (void* p = Allocate(n, static_cast<size_t>(a))) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n, std::align_val_t a) { return operator new(n, a); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return Allocate(n, 0); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return Allocate(n, 0); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

namespace g4 {
namespace {

constexpr int kWarmupTokens = 3;
constexpr int kCountedTokens = 24;

struct Case {
  const char* preset;
  WeightType quant;
  int threads;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.preset << " " << WeightTypeName(c.quant) << " " << c.threads << " threads";
}

std::string Name(const testing::TestParamInfo<Case>& info) {
  return std::string(info.param.preset) + "_" + WeightTypeName(info.param.quant) + "_" +
         std::to_string(info.param.threads) + "threads";
}

class DecodeAllocations : public testing::TestWithParam<Case> {
 protected:
  std::unique_ptr<Model> LoadPresetModel() {
    const std::string dir = TinyCheckpoint(GetParam().preset, {.vocab = 512});
    if (dir.empty()) return nullptr;
    ModelOptions options;
    options.threads = GetParam().threads;
    options.load.quant = GetParam().quant;
    auto model = g4::LoadModel(dir, options);
    EXPECT_TRUE(model.ok()) << model.status().message();
    return model.ok() ? std::move(*model) : nullptr;
  }
};

// The real single-sequence path (runtime/generate.cc): sampling, the token callback and
// Model::Forward, counted between the callbacks of token kWarmupTokens and of the last token.
// Returns the allocations counted (-1 on failure, or when `count` is false: another thread counts).
int64_t GenerateAllocations(Model& model, const SamplingParams& sampling, bool count = true,
                            KvType kv_type = KvType::kF32) {
  KvCache cache(model.plan(), 256, 16, kv_type);
  GenerateOptions options;
  options.max_new_tokens = kWarmupTokens + kCountedTokens + 1;
  options.ignore_eos = true;
  options.prefill_chunk = 16;
  options.sampling = sampling;
  const std::vector<int> prompt = {2, 105, 7, 33, 81, 150, 9, 12, 300, 41, 5, 6, 77, 91, 17, 23,
                                   48, 61, 3, 4};
  int seen = 0;
  std::unique_ptr<AllocationCounter> counter;
  int64_t allocations = -1;
  auto on_token = [&](int) {
    ++seen;
    if (count && seen == kWarmupTokens) counter = std::make_unique<AllocationCounter>();
    if (count && seen == options.max_new_tokens) allocations = counter->Stop();
    return true;
  };
  auto result = Generate(model, cache, prompt, options, on_token);
  EXPECT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(seen, options.max_new_tokens);
  return allocations;
}

// Compact caches (--kv-type) store and read K/V in place: no per-token buffers either.
TEST_P(DecodeAllocations, CompactKvCachesAllocateNothingPerToken) {
  auto model = LoadPresetModel();
  ASSERT_TRUE(model);
  for (KvType type : {KvType::kBF16, KvType::kQ8})
    EXPECT_EQ(GenerateAllocations(*model, SamplingParams{}, true, type), 0)
        << KvTypeName(type) << ": allocations in " << kCountedTokens + 1 << " greedy decode steps";
}

TEST_P(DecodeAllocations, GenerateAllocatesNothingPerToken) {
  auto model = LoadPresetModel();
  ASSERT_TRUE(model);
  EXPECT_EQ(GenerateAllocations(*model, SamplingParams{}), 0)
      << "allocations in " << kCountedTokens + 1 << " greedy decode steps";
  SamplingParams sampled;
  sampled.temperature = 0.8f;
  sampled.top_k = 40;
  sampled.top_p = 0.95f;
  sampled.seed = 7;
  sampled.has_seed = true;
  EXPECT_EQ(GenerateAllocations(*model, sampled), 0)
      << "allocations in " << kCountedTokens + 1 << " sampled (top-k, top-p) decode steps";
  sampled.top_k = 0;  // every finite logit is a candidate
  EXPECT_EQ(GenerateAllocations(*model, sampled), 0)
      << "allocations in " << kCountedTokens + 1 << " sampled (top-p) decode steps";
  SamplingParams penalised;  // greedy over penalised logits: the history is counted every step
  penalised.repetition_penalty = 1.3f;
  penalised.presence_penalty = 0.5f;
  penalised.frequency_penalty = 0.25f;
  penalised.logit_bias = {{5, 1.5f}};
  EXPECT_EQ(GenerateAllocations(*model, penalised), 0)
      << "allocations in " << kCountedTokens + 1 << " decode steps with penalties";
}

// Speculative decoding, greedy: drafting (prompt lookup over a repetitive prompt, or a draft
// model with its own cache), the verify pass of up to draft_max + 1 rows, verification and the
// rollback, counted between the callbacks of token kWarmupTokens and of the last token.
TEST_P(DecodeAllocations, SpeculativeGenerateAllocatesNothingPerToken) {
  auto model = LoadPresetModel();
  ASSERT_TRUE(model);
  std::vector<int> prompt = {2, 105, 7, 33, 81, 150, 9, 12, 300, 41, 5, 6, 77, 91, 17, 23};
  prompt.insert(prompt.end(), prompt.begin() + 1, prompt.end());
  NgramDrafter ngram(1, 3);
  auto self = DraftModelDrafter::Create(*model, model->plan().vocab, SamplingParams{}, 256, 5);
  ASSERT_TRUE(self.ok()) << self.status().message();
  // The assistant drafter (model/assistant.h) for this preset: 4 steps over the target's cache.
  auto assistant_spec = SynthAssistantPreset(std::string(GetParam().preset) + "-assistant", "tiny");
  ASSERT_TRUE(assistant_spec.ok());
  const std::string assistant_dir = TestTempDir(std::string(GetParam().preset) + "-assistant");
  ASSERT_TRUE(WriteSynthAssistant(*assistant_spec, {.vocab = 512}, assistant_dir).ok());
  auto assistant = Assistant::Load(assistant_dir, *model);
  ASSERT_TRUE(assistant.ok()) << assistant.status().message();
  MtpDrafter mtp(std::move(*assistant));
  for (Drafter* drafter : {static_cast<Drafter*>(&ngram), static_cast<Drafter*>(self->get()),
                           static_cast<Drafter*>(&mtp)}) {
    KvCache cache(model->plan(), 256, 16);
    GenerateOptions options;
    options.max_new_tokens = kWarmupTokens + kCountedTokens + 1;
    options.ignore_eos = true;
    options.prefill_chunk = 16;
    int seen = 0;
    std::unique_ptr<AllocationCounter> counter;
    int64_t allocations = -1;
    auto on_token = [&](int) {
      ++seen;
      if (seen == kWarmupTokens) counter = std::make_unique<AllocationCounter>();
      if (seen == options.max_new_tokens) allocations = counter->Stop();
      return true;
    };
    auto result = GenerateSpeculative(*model, cache, prompt, options, *drafter, {.draft_max = 4},
                                      on_token);
    ASSERT_TRUE(result.ok()) << result.status().message();
    EXPECT_EQ(seen, options.max_new_tokens);
    EXPECT_GT(result->drafted, 0) << drafter->name();
    EXPECT_EQ(allocations, 0) << drafter->name() << ": allocations in " << kCountedTokens + 1
                              << " speculatively decoded tokens";
  }
}

// A batched decode step of several sequences at different positions through Model::Forward, as
// the scheduler runs it.
TEST_P(DecodeAllocations, BatchedForwardAllocatesNothingPerStep) {
  auto model = LoadPresetModel();
  ASSERT_TRUE(model);
  const int vocab = model->plan().vocab;
  constexpr int kSequences = 3;
  std::vector<std::unique_ptr<KvCache>> caches;
  Activations act;
  std::vector<BatchRow> rows(kSequences);
  for (int s = 0; s < kSequences; ++s) {
    caches.push_back(std::make_unique<KvCache>(model->plan(), 256, 16));
    std::vector<int> prompt;
    for (int i = 0; i < 5 + 17 * s; ++i) prompt.push_back((i * 37 + s * 11) % vocab);
    auto logits = Prefill(*model, *caches[s], prompt, 16, false, act);
    ASSERT_TRUE(logits.ok()) << logits.status().message();
    rows[s] = BatchRow{prompt.back(), caches[s]->n_past(), caches[s].get(), true};
  }
  std::vector<float> logits(static_cast<size_t>(kSequences) * vocab);
  int64_t allocations = -1;
  std::unique_ptr<AllocationCounter> counter;
  for (int step = 0; step < kWarmupTokens + kCountedTokens; ++step) {
    if (step == kWarmupTokens) counter = std::make_unique<AllocationCounter>();
    for (int s = 0; s < kSequences; ++s) rows[s].pos = caches[s]->n_past();
    ASSERT_TRUE(model->Forward(rows, act, logits.data()).ok());
    for (int s = 0; s < kSequences; ++s) {
      const float* l = logits.data() + static_cast<size_t>(s) * vocab;
      rows[s].token = static_cast<int>(std::max_element(l, l + vocab) - l);
    }
  }
  allocations = counter->Stop();
  EXPECT_EQ(allocations, 0) << "allocations in " << kCountedTokens << " batched decode steps";
}

INSTANTIATE_TEST_SUITE_P(Presets, DecodeAllocations,
                         testing::Values(Case{"e2b", WeightType::kBF16, 1},
                                         Case{"e2b", WeightType::kBF16, 2},
                                         Case{"e2b", WeightType::kQ4, 3},
                                         Case{"12b", WeightType::kQ8, 2}),
                         Name);

// Tensor parallel, two in-process ranks at q8: every rank looks its embedding rows up in the
// mapped checkpoint table (rounded through q8), all-reduces and gathers the LM head's blocks. The
// counter is global, so both ranks' allocations in rank 0's window count.
TEST(DecodeAllocationsTensorParallel, TwoRanksAllocateNothingPerToken) {
  const std::string dir = TinyCheckpoint("e2b", {.vocab = 512});
  ASSERT_FALSE(dir.empty());
  ModelOptions options;
  options.threads = 1;
  options.load.quant = WeightType::kQ8;
  std::atomic<int64_t> rank0_allocations{-1};
  const Status st = RunTensorParallel(2, [&](Communicator* comm) -> Status {
    G4_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, g4::LoadModel(dir, options.OnRanks(comm)));
    const int64_t n = GenerateAllocations(*model, SamplingParams{}, comm->rank() == 0);
    if (comm->rank() == 0) rank0_allocations = n;
    return OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(rank0_allocations.load(), 0) << "allocations in " << kCountedTokens + 1
                                         << " tensor-parallel decode steps";
}

// The counter itself: an allocation inside the scope is seen (else zero would prove nothing).
TEST(AllocationCounter, SeesAnAllocation) {
  AllocationCounter counter;
  auto* volatile p = new std::vector<int>(100);
  delete p;
  EXPECT_EQ(counter.Stop(), 2);  // the vector object and its buffer
}

}  // namespace
}  // namespace g4
