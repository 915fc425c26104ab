//===- Distributed.cpp - Data-parallel workers of cac-run -----------------===//

#include "cac/Runtime/Train/Distributed.h"

#include "cac/Runtime/Support/StopSignals.h"
#include "cac/Runtime/Support/Random.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>
#ifdef CAC_HAVE_GLOO
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef CAC_HAVE_NCCL
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>
#include <netinet/in.h>
#include <stdexcept>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace cac::rt::train {

bool haveGloo() {
#ifdef CAC_HAVE_GLOO
  return true;
#else
  return false;
#endif
}

bool haveNccl() {
#ifdef CAC_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

// The collectives' class: LibTorch 2 split c10d's backends (Gloo, NCCL) from
// the ProcessGroup that dispatches to them; 1.13's backends are
// ProcessGroups. Both have allreduce(tensors, options).
#if TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

struct Communicator::State {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<BackendBase> pg;
  /// Where collectives run: the worker's device, whatever the backend
  /// (tensors elsewhere are copied there and back).
  at::Device device{at::kCPU};
};

Communicator::~Communicator() = default;

std::unique_ptr<Communicator> Communicator::connect(const DistOptions &o) {
  if (o.worldSize < 1 || o.rank < 0 || o.rank >= o.worldSize)
    throw std::runtime_error("distributed: rank " + std::to_string(o.rank) +
                             " is not in [0, " + std::to_string(o.worldSize) +
                             ")");
  if (o.masterPort < 1 || o.masterPort > 65535)
    throw std::runtime_error("distributed: master port " +
                             std::to_string(o.masterPort) +
                             " is not in [1, 65535]");
  if (o.backend == DistBackend::Nccl && !haveNccl())
    throw std::runtime_error(
        "distributed: this cac-run was built against a LibTorch without "
        "ProcessGroupNCCL (Debian's libtorch is CPU-only); use --workers N "
        "(Gloo, with --device cuda on GPUs), or rebuild against a CUDA "
        "LibTorch");
  if (o.backend == DistBackend::Gloo && !haveGloo())
    throw std::runtime_error(
        "distributed: this cac-run was built against a LibTorch whose "
        "ProcessGroupGloo headers were not found (install Gloo's headers, "
        "e.g. Debian's libgloo-dev, or stage them with scripts/gpu/stage.sh, "
        "and rebuild), so it has no Gloo workers");
  if (o.backend == DistBackend::Nccl && !o.device.is_cuda())
    throw std::runtime_error("distributed: NCCL all-reduces on a GPU, and "
                             "rank " +
                             std::to_string(o.rank) + "'s device is " +
                             o.device.str());
  std::unique_ptr<Communicator> c(new Communicator());
  c->state_ = std::make_unique<State>();
  c->rank_ = o.rank;
  c->size_ = o.worldSize;
  c->backend_ = o.backend;
  c->state_->device = o.device;
  // The rank's GPU is current before the first collective, so that no
  // backend opens a context on GPU 0 for it.
  if (o.device.is_cuda())
    c10::impl::getDeviceGuardImpl(c10::kCUDA)->setDevice(o.device);
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(o.masterPort);
    so.isServer = o.rank == 0;
    so.numWorkers = static_cast<std::size_t>(o.worldSize);
    so.waitWorkers = true;
    so.timeout = o.timeout;
    c->state_->store = c10::make_intrusive<c10d::TCPStore>(o.masterAddr, so);
    if (o.backend == DistBackend::Gloo) {
#ifdef CAC_HAVE_GLOO
      auto opts = c10d::ProcessGroupGloo::Options::create(o.timeout);
      // Gloo's device binds where this host's name resolves; a single-node
      // job on the loopback stays on the loopback.
      bool loopback = o.masterAddr == "127.0.0.1" ||
                      o.masterAddr == "localhost" || o.masterAddr == "::1";
      opts->devices.push_back(
          loopback
              ? c10d::ProcessGroupGloo::createDeviceForHostname(o.masterAddr)
              : c10d::ProcessGroupGloo::createDefaultDevice());
      opts->threads = 2;
      c->state_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(
          c->state_->store, o.rank, o.worldSize, opts);
#endif
    } else {
#ifdef CAC_HAVE_NCCL
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = o.timeout;
      c->state_->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(
          c->state_->store, o.rank, o.worldSize, opts);
#endif
    }
    // The first collective completes the rendezvous, so that a worker that
    // cannot reach the others fails here rather than in the first step.
    c->barrier();
  } catch (const std::exception &e) {
    throw std::runtime_error(
        "distributed: rank " + std::to_string(o.rank) + " of " +
        std::to_string(o.worldSize) + " could not join the job at " +
        o.masterAddr + ":" + std::to_string(o.masterPort) + ": " + e.what());
  }
  return c;
}

void Communicator::sum(at::Tensor &t) {
  if (size_ == 1)
    return;
  at::Tensor buf = t.to(state_->device).contiguous();
  std::vector<at::Tensor> ts{buf};
  c10d::AllreduceOptions ao;
  ao.reduceOp = c10d::ReduceOp::SUM;
  state_->pg->allreduce(ts, ao)->wait();
  if (!buf.is_same(t))
    t.copy_(buf);
}

void Communicator::sum(std::vector<double> &values) {
  if (size_ == 1 || values.empty())
    return;
  at::Tensor t = at::tensor(values, at::kDouble);
  sum(t);
  auto a = t.accessor<double, 1>();
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = a[static_cast<int64_t>(i)];
}

void Communicator::sumGradients(const std::vector<at::Tensor> &params) {
  if (size_ == 1 || params.empty())
    return;
  // Which gradients exist anywhere (summed flags), then the gradients in
  // buckets of at most kBucket elements (one collective per bucket).
  std::vector<double> defined(params.size());
  for (size_t i = 0; i < params.size(); ++i)
    defined[i] = params[i].grad().defined() ? 1.0 : 0.0;
  sum(defined);
  constexpr int64_t kBucket = int64_t(1) << 24; // 64 MiB of float32
  size_t i = 0;
  while (i < params.size()) {
    std::vector<size_t> members;
    int64_t count = 0;
    for (; i < params.size(); ++i) {
      if (defined[i] == 0)
        continue;
      int64_t n = params[i].numel();
      if (!members.empty() && count + n > kBucket)
        break;
      members.push_back(i);
      count += n;
    }
    if (members.empty())
      continue;
    std::vector<at::Tensor> flat;
    for (size_t m : members) {
      const at::Tensor &p = params[m];
      flat.push_back(
          p.grad().defined()
              ? p.grad().detach().reshape({-1}).to(at::kFloat)
              : at::zeros({p.numel()}, p.options().dtype(at::kFloat)));
    }
    at::Tensor bucket = at::cat(flat);
    sum(bucket);
    int64_t off = 0;
    for (size_t m : members) {
      at::Tensor p = params[m];
      at::Tensor g = bucket.narrow(0, off, p.numel())
                         .view(p.sizes())
                         .to(p.device(), p.scalar_type());
      off += p.numel();
      if (p.grad().defined())
        p.mutable_grad().copy_(g);
      else
        p.mutable_grad() = g.clone();
    }
  }
}

void Communicator::barrier() {
  if (size_ == 1)
    return;
  // A one-element sum is a barrier on every backend (NCCL's barrier needs
  // a device guess; this does not).
  std::vector<double> one{1.0};
  sum(one);
}

std::pair<int64_t, int64_t> shardRange(int64_t n, int rank, int world) {
  return {n * rank / world, n * (rank + 1) / world};
}

float rolloutUniform(uint64_t seed, int64_t step, int64_t prompt,
                     int64_t stream, int64_t tokenIndex) {
  uint64_t h = splitmix64(seed ^ 0x6361632d726f6c6cULL); // "cac-roll"
  h = splitmix64(h ^ static_cast<uint64_t>(step));
  h = splitmix64(h ^ static_cast<uint64_t>(prompt));
  h = splitmix64(h ^ static_cast<uint64_t>(stream));
  h = splitmix64(h ^ static_cast<uint64_t>(tokenIndex));
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f); // 24 bits
}

int pickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    throw std::runtime_error(std::string("cannot open a socket: ") +
                             std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) != 0) {
    int err = errno;
    close(fd);
    throw std::runtime_error(std::string("cannot find a free port: ") +
                             std::strerror(err));
  }
  close(fd);
  return ntohs(addr.sin_port);
}

namespace {

std::string describeStatus(int status) {
  if (WIFEXITED(status))
    return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "status " + std::to_string(status);
}

int exitCode(int status) {
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

} // namespace

int launchWorkers(const LaunchPlan &plan) {
  if (plan.argv.empty() || plan.nprocs < 1)
    return 127;
  const int world = plan.nprocs * plan.nnodes;
  std::vector<char *> args;
  for (const auto &a : plan.argv)
    args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  std::cout.flush();
  std::cerr.flush();

  std::vector<pid_t> pids(plan.nprocs, -1);
  auto stopAll = [&](int except) {
    for (int r = 0; r < plan.nprocs; ++r)
      if (r != except && pids[r] > 0)
        kill(pids[r], SIGTERM);
  };
  pid_t parent = getpid();
  for (int local = 0; local < plan.nprocs; ++local) {
    int rank = plan.nodeRank * plan.nprocs + local;
    pid_t pid = fork();
    if (pid < 0) {
      std::cerr << "cac-run: error: cannot start worker " << rank << ": "
                << std::strerror(errno) << "\n";
      stopAll(-1);
      for (int r = 0; r < local; ++r)
        waitpid(pids[r], nullptr, 0);
      return 127;
    }
    if (pid == 0) {
      // A worker must not outlive its launcher.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent)
        _exit(127);
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(plan.nprocs).c_str(), 1);
      setenv("MASTER_ADDR", plan.masterAddr.c_str(), 1);
      setenv("MASTER_PORT", std::to_string(plan.masterPort).c_str(), 1);
      execv(args[0], args.data());
      std::fprintf(stderr, "cac-run: error: cannot run '%s': %s\n", args[0],
                   std::strerror(errno));
      _exit(127);
    }
    pids[local] = pid;
  }

  int result = 0, running = plan.nprocs;
  bool stopping = false;
  int forwarded = 0; // the stop signal passed on to the workers
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (running > 0) {
    // A stop signal (StopSignals.h) goes to every worker once: each finishes
    // its step and the checkpoint; a second one kills them.
    if (int sig = stopSignal(); sig && !forwarded && !stopping) {
      forwarded = sig;
      for (pid_t p : pids)
        if (p > 0)
          kill(p, sig);
    }
    if (forwarded && stopSignalCount() >= 2 && result == 0) {
      for (pid_t p : pids)
        if (p > 0)
          kill(p, SIGKILL);
      result = 128 + forwarded;
    }
    int status = 0;
    // Polled, so that a signal is seen however it falls between the calls.
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    if (pid == 0) {
      if (stopping && std::chrono::steady_clock::now() > deadline) {
        for (pid_t p : pids)
          if (p > 0)
            kill(p, SIGKILL);
        deadline = std::chrono::steady_clock::time_point::max();
      }
      usleep(50 * 1000);
      continue;
    }
    int local = -1;
    for (int r = 0; r < plan.nprocs; ++r)
      if (pids[r] == pid)
        local = r;
    if (local < 0)
      continue;
    pids[local] = -1;
    --running;
    bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    // A worker that stopped for the forwarded signal did what was asked.
    if (forwarded && exitCode(status) == 128 + forwarded) {
      if (result == 0)
        result = 128 + forwarded;
      continue;
    }
    if (failed && !stopping) {
      int rank = plan.nodeRank * plan.nprocs + local;
      std::cerr << "cac-run: error: worker " << rank << " of " << world
                << " failed (" << describeStatus(status) << ")";
      if (running > 0)
        std::cerr << "; stopping the other workers";
      std::cerr << "\n";
      result = exitCode(status);
      stopping = true;
      stopAll(local);
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    }
  }
  return result;
}

} // namespace cac::rt::train
