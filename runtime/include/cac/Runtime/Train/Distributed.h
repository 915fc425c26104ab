//===- Distributed.h - Data-parallel workers of cac-run ---------*- C++ -*-===//
//
// Data parallelism for the trainer (docs/training.md, "Data-parallel
// training"): N worker processes, one per rank, meet through c10d's TCPStore
// (hosted by rank 0) and all-reduce the tensors of their device with
// ProcessGroupGloo (CPU or CUDA tensors) or ProcessGroupNCCL (CUDA), each
// where the LibTorch found at configure time provides it (CAC_HAVE_GLOO,
// CAC_HAVE_NCCL). The backend is the only difference between the two.
//
// A Communicator is what the trainer sees of the process group: sums of
// scalars and of gradients, and a barrier. launchWorkers() is the local
// launcher behind `cac-run --workers N` / `--gpus N`: it starts the ranks of
// one node as child processes and stops all of them when one fails.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TRAIN_DISTRIBUTED_H
#define CAC_RUNTIME_TRAIN_DISTRIBUTED_H

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cac::rt::train {

/// Which c10d process group the workers use.
enum class DistBackend { Gloo, Nccl };

/// Whether this build has ProcessGroupNCCL (a CUDA LibTorch with NCCL).
bool haveNccl();
/// Whether this build has ProcessGroupGloo (LibTorch with Gloo's headers).
bool haveGloo();

/// Where one worker stands in a job and how it finds the others.
struct DistOptions {
  DistBackend backend = DistBackend::Gloo;
  int rank = 0;
  int worldSize = 1;
  /// Where the collectives' tensors live: the worker's device (its
  /// cuda:LOCAL_RANK under --gpus, a GPU that ranks may share with Gloo, or
  /// the CPU). It becomes the process's current device. NCCL needs a GPU;
  /// Gloo takes CPU and CUDA tensors alike.
  at::Device device{at::kCPU};
  /// The TCPStore's host (rank 0 listens there) and port.
  std::string masterAddr = "127.0.0.1";
  int masterPort = 29500;
  /// How long rendezvous and each collective may wait for the others.
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
};

/// A worker's view of the process group.
class Communicator {
public:
  /// Joins the job \p opts describes: rank 0 hosts the TCPStore, every rank
  /// connects to it and builds the process group. Throws std::runtime_error
  /// with a message for the user (bad backend, rendezvous timeout, ...).
  static std::unique_ptr<Communicator> connect(const DistOptions &opts);
  virtual ~Communicator();

  int rank() const { return rank_; }
  int size() const { return size_; }
  DistBackend backend() const { return backend_; }

  /// Sums \p values over all ranks, in place (in double precision).
  void sum(std::vector<double> &values);
  /// Sums the float tensor \p t over all ranks, in place.
  void sum(at::Tensor &t);

  /// Sums the gradients of \p params over all ranks, in place, in buckets
  /// of flattened gradients. A parameter whose gradient is undefined on
  /// every rank keeps it undefined (as one process would: AdamW skips it);
  /// one defined on some ranks only is summed with zeros for the others.
  void sumGradients(const std::vector<at::Tensor> &params);

  /// Waits until every rank has reached this point.
  void barrier();

private:
  Communicator() = default;
  struct State;
  std::unique_ptr<State> state_;
  int rank_ = 0, size_ = 1;
  DistBackend backend_ = DistBackend::Gloo;
};

/// The rank \p rank of \p world's share of [0, n): [n*rank/world,
/// n*(rank+1)/world), contiguous and as even as can be.
std::pair<int64_t, int64_t> shardRange(int64_t n, int rank, int world);

/// The sampling uniform in [0, 1) of response token \p tokenIndex of stream
/// \p stream of prompt \p prompt (its index in the step's global batch) at
/// RL step \p step: a hash of the five numbers (splitmix64), so that a
/// rollout's tokens do not depend on which worker generates it or what else
/// is in its batch. A plan numbers the streams of a prompt itself
/// (PlanContext::uniform: the group plan's samples are streams 0..n-1).
float rolloutUniform(uint64_t seed, int64_t step, int64_t prompt,
                     int64_t stream, int64_t tokenIndex);

/// A free TCP port on the loopback interface (the launcher's default
/// --master-port on one node); throws std::runtime_error if none.
int pickFreePort();

/// The ranks of one node to start.
struct LaunchPlan {
  /// The worker's command line: argv[0] is the executable.
  std::vector<std::string> argv;
  /// Processes to start on this node (local ranks 0..nprocs-1).
  int nprocs = 1;
  /// Nodes in the job and this node's index (global rank = node * nprocs +
  /// local rank).
  int nnodes = 1, nodeRank = 0;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 29500;
};

/// Starts plan.nprocs workers, each with the torchrun environment (RANK,
/// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) set,
/// and waits for them. When one fails (non-zero exit or a signal) the others
/// get SIGTERM (then SIGKILL after 5 s) and a message naming the failed rank
/// goes to stderr. Returns 0 when every worker succeeded, else the first
/// failure's exit status (128 + signal for a signal; 127 if a worker could
/// not be started). A stop request of this process (StopSignals.h) is
/// forwarded to every worker once (each finishes its step and checkpoints;
/// 128 + the signal is returned then); a second one kills them.
int launchWorkers(const LaunchPlan &plan);

} // namespace cac::rt::train

#endif // CAC_RUNTIME_TRAIN_DISTRIBUTED_H
