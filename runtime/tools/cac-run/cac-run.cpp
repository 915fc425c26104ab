//===- cac-run.cpp - Train a policy as a training file says ---------------===//
//
//   cac-run TRAIN.cac [--steps N] [--sft-steps N] [--eval-every N]
//                     [--seed N] [--out DIR] [--threads N] [--resume]
//                     [--compiler PATH] [--no-progress] [--check]
//                     [--device cpu|cuda|cuda:N]
//                     [--workers N | --gpus N] [--nnodes N] [--node-rank K]
//                     [--master-addr HOST] [--master-port P]
//   cac-run TRAIN.cac ... --worker gloo|nccl     (one rank; torchrun's env)
//
// Exit status: 0 on success, 1 on a diagnostic or a run error, 2 on a bad
// command line. See docs/training.md.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Train/Distributed.h"
#include "cac/Runtime/Train/TrainFile.h"
#include "cac/Runtime/Train/Trainer.h"

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <execinfo.h>
#include <fstream>
#include <iostream>
#include <sstream>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace cac::rt::train;

namespace {

const char *kUsage =
    "usage: cac-run TRAIN.cac [options]\n"
    "\n"
    "Trains a policy as the training file says (docs/training.md).\n"
    "\n"
    "options (each overrides the training file):\n"
    "  --steps N        RL steps\n"
    "  --sft-steps N    SFT warm-start steps (0: none)\n"
    "  --eval-every N   held-out greedy eval every N RL steps (0: start/end)\n"
    "  --seed N         seed of initialization, data and sampling\n"
    "  --out DIR        output folder (metrics, plot, checkpoint, final)\n"
    "  --threads N      CPU threads (0: LibTorch's default)\n"
    "other options:\n"
    "  --device D       where the models, the estimator and the update run:\n"
    "                   cpu (default), cuda or cuda:N (a CUDA LibTorch; the\n"
    "                   estimator runs its kernels.ptx); --gpus workers use\n"
    "                   cuda:LOCAL_RANK\n"
    "  --resume         continue from DIR/checkpoint\n"
    "  --compiler PATH  the `cac` compiler for .cac estimators (default:\n"
    "                   $CAC_COMPILER, else `cac` beside cac-run, else PATH)\n"
    "  --no-progress    no progress bar\n"
    "  --check          check the training file and the estimator, then exit\n"
    "data parallelism (docs/training.md):\n"
    "  --workers N      N CPU worker processes per node (c10d Gloo)\n"
    "  --gpus N         N GPU worker processes per node (c10d NCCL; needs a\n"
    "                   LibTorch with NCCL)\n"
    "  --nnodes N       nodes in the job (default 1); start cac-run on each\n"
    "  --node-rank K    this node's index, 0..N-1 (node 0 hosts the store)\n"
    "  --master-addr H  the host of node 0 (default 127.0.0.1)\n"
    "  --master-port P  its TCPStore port (default: a free port on one node,\n"
    "                   29500 on several)\n"
    "  --worker B       run as one rank (B: gloo or nccl) with RANK,\n"
    "                   WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT in\n"
    "                   the environment, as torchrun sets them\n";

int usageError(const std::string &msg) {
  std::cerr << "cac-run: error: " << msg << "\n" << kUsage;
  return 2;
}

std::optional<int64_t> parseCount(const std::string &s) {
  if (s.empty() || s.size() > 15)
    return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

/// A non-negative integer from the environment variable \p name.
std::optional<int64_t> envCount(const char *name) {
  const char *v = std::getenv(name);
  return v ? parseCount(v) : std::nullopt;
}

bool isExecutable(const fs::path &p) {
  return !p.empty() && fs::is_regular_file(p) && access(p.c_str(), X_OK) == 0;
}

fs::path findCompiler() {
  if (const char *env = std::getenv("CAC_COMPILER"))
    if (isExecutable(env))
      return env;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && isExecutable(self.parent_path() / "cac"))
    return self.parent_path() / "cac";
  if (const char *path = std::getenv("PATH")) {
    std::stringstream ss(path);
    std::string dir;
    while (std::getline(ss, dir, ':'))
      if (!dir.empty() && isExecutable(fs::path(dir) / "cac"))
        return fs::path(dir) / "cac";
  }
  return {};
}

/// A crash (a bug of cac's or of a library's, never of the user's input)
/// prints where it happened before the process dies with its signal, so a
/// report can name the function.
void reportCrash(int sig) {
  const char *what = sig == SIGSEGV ? "segmentation fault"
                     : sig == SIGBUS ? "bus error"
                     : sig == SIGFPE ? "arithmetic exception"
                     : sig == SIGILL ? "illegal instruction"
                                     : "abort";
  const char *head = "cac-run: crashed (";
  const char *tail = "); this is a bug in cac, please report it with "
                     "the stack below:\n";
  (void)!::write(2, head, std::strlen(head));
  (void)!::write(2, what, std::strlen(what));
  (void)!::write(2, tail, std::strlen(tail));
  void *frames[64];
  int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, 2);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void installCrashReporter() {
  // backtrace() loads libgcc on first use: not inside the handler.
  void *warm[1];
  ::backtrace(warm, 1);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
    std::signal(sig, reportCrash);
}

} // namespace

int main(int argc, char **argv) {
  installCrashReporter();
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string file;
  Overrides ov;
  TrainerOptions opts;
  bool check = false;
  std::optional<fs::path> compiler;
  // Data parallelism: launcher flags (not passed on to the workers) and the
  // worker entry.
  std::optional<int64_t> workers, gpus, nnodes, nodeRank, masterPort;
  std::optional<std::string> masterAddr, workerBackend, deviceSpec;
  std::vector<std::string> workerArgs;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    size_t argStart = i;
    bool launcherFlag = false;
    auto value = [&](std::string &out) {
      if (i + 1 >= args.size())
        return false;
      out = args[++i];
      return true;
    };
    auto count = [&](std::optional<int64_t> &out) -> bool {
      std::string v;
      if (!value(v)) {
        usageError(a + " needs a value");
        return false;
      }
      auto n = parseCount(v);
      if (!n) {
        usageError(a + " expects a non-negative integer, got '" + v + "'");
        return false;
      }
      out = n;
      return true;
    };
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (a == "--steps") {
      if (!count(ov.steps))
        return 2;
    } else if (a == "--sft-steps") {
      if (!count(ov.sftSteps))
        return 2;
    } else if (a == "--eval-every") {
      if (!count(ov.evalEvery))
        return 2;
    } else if (a == "--seed") {
      if (!count(ov.seed))
        return 2;
    } else if (a == "--threads") {
      if (!count(ov.threads))
        return 2;
      if (*ov.threads > 1024)
        return usageError("--threads must be at most 1024");
    } else if (a == "--out") {
      std::string v;
      if (!value(v) || v.empty())
        return usageError("--out needs a folder");
      ov.out = v;
    } else if (a == "--compiler") {
      std::string v;
      if (!value(v) || v.empty())
        return usageError("--compiler needs a path");
      if (!isExecutable(v))
        return usageError("--compiler: '" + v + "' is not an executable");
      compiler = fs::path(v);
    } else if (a == "--resume") {
      opts.resume = true;
    } else if (a == "--no-progress") {
      opts.progress = false;
    } else if (a == "--check") {
      check = true;
    } else if (a == "--device") {
      std::string v;
      if (!value(v) || v.empty() || v[0] == '-')
        return usageError("--device needs cpu, cuda or cuda:N");
      deviceSpec = v;
    } else if (a == "--workers" || a == "--gpus") {
      launcherFlag = true;
      if (!count(a == "--workers" ? workers : gpus))
        return 2;
      if (workers && gpus)
        return usageError("--workers and --gpus exclude each other");
      int64_t n = workers ? *workers : *gpus;
      if (n < 1 || n > 1024)
        return usageError(a + " must be in [1, 1024]");
      if (workers && !haveGloo())
        return usageError(
            "--workers: this cac-run was built without ProcessGroupGloo "
            "(its LibTorch's Gloo headers were not found), so it has no CPU "
            "workers");
      if (gpus && !haveNccl())
        return usageError(
            "--gpus: this cac-run was built against a LibTorch without NCCL "
            "(Debian's libtorch is CPU-only), so it has no GPU workers; use "
            "--workers N for CPU workers (Gloo)");
    } else if (a == "--nnodes") {
      launcherFlag = true;
      if (!count(nnodes))
        return 2;
      if (*nnodes < 1 || *nnodes > 4096)
        return usageError("--nnodes must be in [1, 4096]");
    } else if (a == "--node-rank") {
      launcherFlag = true;
      if (!count(nodeRank))
        return 2;
    } else if (a == "--master-port") {
      launcherFlag = true;
      if (!count(masterPort))
        return 2;
      if (*masterPort < 1 || *masterPort > 65535)
        return usageError("--master-port must be in [1, 65535]");
    } else if (a == "--master-addr") {
      launcherFlag = true;
      std::string v;
      if (!value(v) || v.empty())
        return usageError("--master-addr needs a host name or address");
      masterAddr = v;
    } else if (a == "--worker") {
      std::string v;
      if (!value(v) || (v != "gloo" && v != "nccl"))
        return usageError("--worker needs a backend: gloo or nccl");
      workerBackend = v;
    } else if (!a.empty() && a[0] == '-') {
      return usageError("unknown option '" + a + "'");
    } else if (file.empty()) {
      file = a;
    } else {
      return usageError("more than one training file ('" + file + "', '" + a +
                        "')");
    }
    if (!launcherFlag)
      workerArgs.insert(workerArgs.end(), args.begin() + argStart,
                        args.begin() + i + 1);
  }
  // The device: --device, else a GPU worker's cuda:LOCAL_RANK, else the CPU.
  // Checked before anything else, and by the launcher too, so a bad one
  // stops before any worker starts.
  if (gpus && deviceSpec)
    return usageError("--gpus N puts worker r on cuda:r; --device is for one "
                      "process or --workers");
  if (gpus) // the launcher: its last worker's device must exist
    deviceSpec = "cuda:" + std::to_string(*gpus - 1);
  else if (!deviceSpec && workerBackend && *workerBackend == "nccl")
    deviceSpec =
        "cuda:" + std::to_string(envCount("LOCAL_RANK").value_or(0));
  if (deviceSpec) {
    std::string err = checkDevice(*deviceSpec, opts.device);
    if (!err.empty())
      return usageError(err);
  }
  if (file.empty())
    return usageError("no training file (try examples/arith/train.cac)");

  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::cerr << file << ": error: cannot read the training file\n";
    return 1;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  DiagnosticEngine diag(file, ss.str());
  auto block = parseTrainFile(ss.str(), diag);
  std::optional<TrainConfig> cfg;
  if (block)
    cfg = buildTrainConfig(*block, file, diag);
  if (!cfg) {
    std::cerr << diag.render();
    return 1;
  }
  applyOverrides(*cfg, ov);
  opts.compiler = compiler ? *compiler : findCompiler();

  // The launcher: start this node's workers (this binary with --worker).
  bool launch =
      (workers || gpus || nnodes || nodeRank || masterAddr || masterPort) &&
      !check;
  if (launch && workerBackend)
    return usageError("--worker runs one rank; it takes none of --workers, "
                      "--gpus, --nnodes, --node-rank, --master-addr, "
                      "--master-port (use the environment instead)");
  if (launch) {
    if (!workers && !gpus)
      return usageError("--nnodes/--node-rank/--master-addr/--master-port "
                        "need --workers N or --gpus N");
    LaunchPlan plan;
    plan.nprocs = static_cast<int>(workers ? *workers : *gpus);
    plan.nnodes = static_cast<int>(nnodes.value_or(1));
    plan.nodeRank = static_cast<int>(nodeRank.value_or(0));
    if (plan.nodeRank >= plan.nnodes)
      return usageError("--node-rank " + std::to_string(plan.nodeRank) +
                        " is not below --nnodes " +
                        std::to_string(plan.nnodes));
    if (plan.nnodes > 1 && !masterAddr)
      return usageError("--nnodes " + std::to_string(plan.nnodes) +
                        " needs --master-addr (the host of node 0)");
    plan.masterAddr = masterAddr.value_or("127.0.0.1");
    try {
      plan.masterPort = masterPort        ? static_cast<int>(*masterPort)
                        : plan.nnodes > 1 ? 29500
                                          : pickFreePort();
    } catch (const std::exception &e) {
      std::cerr << "cac-run: error: " << e.what() << "\n";
      return 1;
    }
    int world = plan.nprocs * plan.nnodes;
    if (cfg->steps > 0 && cfg->prompts < world) {
      std::cerr << "cac-run: error: " << world
                << " workers need at least as many prompts per step (the "
                   "training file sets prompts = "
                << cfg->prompts << ")\n";
      return 1;
    }
    std::error_code ec;
    fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (ec) {
      std::cerr << "cac-run: error: cannot find this executable: "
                << ec.message() << "\n";
      return 1;
    }
    plan.argv = {self.string()};
    plan.argv.insert(plan.argv.end(), workerArgs.begin(), workerArgs.end());
    plan.argv.push_back("--worker");
    plan.argv.push_back(gpus ? "nccl" : "gloo");
    return launchWorkers(plan);
  }

  // A worker: join the job the environment describes.
  std::unique_ptr<Communicator> comm;
  if (workerBackend && !check) {
    DistOptions d;
    d.backend =
        *workerBackend == "nccl" ? DistBackend::Nccl : DistBackend::Gloo;
    auto rank = envCount("RANK"), world = envCount("WORLD_SIZE");
    auto port = envCount("MASTER_PORT");
    const char *addr = std::getenv("MASTER_ADDR");
    if (!rank || !world || !port || !addr || !*addr) {
      std::cerr << "cac-run: error: --worker needs RANK, WORLD_SIZE, "
                   "MASTER_ADDR and MASTER_PORT in the environment (as "
                   "torchrun sets them; --workers N sets them for you)\n";
      return 1;
    }
    d.rank = static_cast<int>(*rank);
    d.worldSize = static_cast<int>(*world);
    d.localRank = static_cast<int>(envCount("LOCAL_RANK").value_or(0));
    d.masterAddr = addr;
    d.masterPort = static_cast<int>(*port);
    try {
      comm = Communicator::connect(d);
    } catch (const std::exception &e) {
      std::cerr << "cac-run: error: " << e.what() << "\n";
      return 1;
    }
    opts.dist = comm.get();
  }

  try {
    Trainer trainer(*cfg, opts);
    bool ok = trainer.prepare(diag);
    // Every rank checks the same file; rank 0 reports.
    if (!comm || comm->rank() == 0)
      std::cerr << diag.render();
    if (!ok)
      return 1;
    if (check) {
      std::cerr << file << ": ok\n";
      return 0;
    }
    trainer.run();
  } catch (const std::exception &e) {
    std::cerr << "cac-run: error: "
              << (comm ? "worker " + std::to_string(comm->rank()) + ": " : "")
              << e.what() << "\n";
    return 1;
  }
  return 0;
}
