#include "parallel/mpi_communicator.h"

#include <chrono>
#include <cstdlib>
#include <thread>

#ifdef G4_HAVE_MPI
#include <mpi.h>
#endif

namespace g4 {

bool LaunchedByMpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

#ifdef G4_HAVE_MPI

namespace {

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm host;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
    MPI_Comm_size(host, &ranks_on_host_);
    MPI_Comm_free(&host);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int ranks_on_host() const override { return ranks_on_host_; }

  // Sizes above INT_MAX elements never occur here (an all-reduce is rows x hidden floats).
  void AllReduceSum(float* data, size_t n) override {
    Timer t(this, n * sizeof(float));
    MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  void AllGather(const float* send, size_t count, float* recv) override {
    Timer t(this, count * sizeof(float));
    MPI_Allgather(send, static_cast<int>(count), MPI_FLOAT, recv, static_cast<int>(count), MPI_FLOAT,
                  MPI_COMM_WORLD);
  }
  void Broadcast(void* data, size_t bytes, int root) override {
    Timer t(this, bytes);
    MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD);
  }
  // MPI_Bcast would busy-poll for as long as the server idles: test a non-blocking one instead,
  // sleeping between tests once it has waited a while.
  void BroadcastIdle(void* data, size_t bytes, int root) override {
    MPI_Request request;
    MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD, &request);
    for (int polls = 0;; ++polls) {
      int done = 0;
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) return;
      // Each test also drives MPI's progress engine, which is not free: an idle follower
      // settles at a test per millisecond.
      if (polls < 20000)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(polls < 25000 ? 200 : 1000));
    }
  }

 private:
  struct Timer {
    Timer(MpiCommunicator* c, size_t bytes) : c_(c), t0_(std::chrono::steady_clock::now()) {
      c_->stats_.calls++;
      c_->stats_.bytes += static_cast<int64_t>(bytes);
    }
    ~Timer() {
      c_->stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    }
    MpiCommunicator* c_;
    std::chrono::steady_clock::time_point t0_;
  };
  int rank_ = 0;
  int size_ = 1;
  int ranks_on_host_ = 1;
};

}  // namespace

Result<Communicator*> MpiWorld() {
  // A function-local static: MPI is finalized when the process exits normally.
  static std::unique_ptr<MpiCommunicator> world = [] {
    // Serialized: one thread at a time calls MPI, but not always the same one (g4 serve loads on
    // a loader thread, steps on the engine thread and says stop from the main thread).
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    return std::make_unique<MpiCommunicator>();
  }();
  return static_cast<Communicator*>(world.get());
}

void AbortMpiWorld(int code) {
  if (!LaunchedByMpi()) return;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (!initialized) (void)MpiWorld();
  MPI_Abort(MPI_COMM_WORLD, code);
}

#else

void AbortMpiWorld(int) {}

Result<Communicator*> MpiWorld() {
  return Status::Error("this g4 was built without MPI (install libopenmpi-dev and rebuild); "
                       "use --tp N without mpirun for in-process ranks");
}

#endif

}  // namespace g4
