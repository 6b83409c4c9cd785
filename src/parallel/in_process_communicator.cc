#include "parallel/in_process_communicator.h"

#include <chrono>
#include <cstring>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace g4 {

namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

}  // namespace

class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(InProcessGroup* group, int rank) : g_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->size_; }

  void AllReduceSum(float* data, size_t n) override {
    Timer t(this, n * sizeof(float));
    const int S = g_->size_;
    g_->send_[rank_] = data;
    g_->Barrier(&sense_);
    // Reduce-scatter and all-gather in one pass: rank r owns elements [n*r/S, n*(r+1)/S), sums
    // them over the ranks in rank order (the same bits everywhere) and writes the sum back into
    // every rank's buffer. No other rank reads or writes those elements meanwhile.
    const size_t lo = n * rank_ / S, hi = n * (rank_ + 1) / S;
    for (size_t i = lo; i < hi; ++i) {
      float s = 0;
      for (int r = 0; r < S; ++r) s += static_cast<float*>(g_->send_[r])[i];
      for (int r = 0; r < S; ++r) static_cast<float*>(g_->send_[r])[i] = s;
    }
    g_->Barrier(&sense_);
  }

  void AllGather(const float* send, size_t count, float* recv) override {
    Timer t(this, count * sizeof(float));
    g_->send_[rank_] = const_cast<float*>(send);
    g_->Barrier(&sense_);
    for (int r = 0; r < g_->size_; ++r)
      std::memcpy(recv + r * count, g_->send_[r], count * sizeof(float));
    g_->Barrier(&sense_);
  }

  void Broadcast(void* data, size_t bytes, int root) override {
    Timer t(this, bytes);
    g_->send_[rank_] = data;
    g_->Barrier(&sense_);
    if (rank_ != root) std::memcpy(data, g_->send_[root], bytes);
    g_->Barrier(&sense_);
  }

  void BroadcastIdle(void* data, size_t bytes, int root) override {
    g_->send_[rank_] = data;
    g_->Barrier(&sense_, /*may_idle=*/true);
    if (rank_ != root) std::memcpy(data, g_->send_[root], bytes);
    g_->Barrier(&sense_);
  }

 private:
  struct Timer {
    Timer(InProcessCommunicator* c, size_t bytes) : c_(c), t0_(std::chrono::steady_clock::now()) {
      c_->stats_.calls++;
      c_->stats_.bytes += static_cast<int64_t>(bytes);
    }
    ~Timer() {
      c_->stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    }
    InProcessCommunicator* c_;
    std::chrono::steady_clock::time_point t0_;
  };

  InProcessGroup* g_;
  int rank_;
  int sense_ = 0;
};

InProcessGroup::InProcessGroup(int size) : size_(size), send_(size, nullptr) {}

std::unique_ptr<Communicator> InProcessGroup::Rank(int rank) {
  return std::make_unique<InProcessCommunicator>(this, rank);
}

// Sense-reversing barrier: the last rank to arrive flips the shared sense; the others wait for it.
void InProcessGroup::Barrier(int* local_sense, bool may_idle) {
  const int sense = 1 - *local_sense;
  *local_sense = sense;
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) == size_ - 1) {
    arrived_.store(0, std::memory_order_relaxed);
    sense_.store(sense, std::memory_order_release);
    return;
  }
  // An idle wait sleeps after ~20k yields (tens of ms): an idle server's follower ranks then
  // cost ~nothing, and the next step starts at most a sleep (~0.2 ms) late.
  for (int spins = 0; sense_.load(std::memory_order_acquire) != sense; ++spins) {
    if (spins < 2000) CpuRelax();
    else if (!may_idle || spins < 20000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace g4
