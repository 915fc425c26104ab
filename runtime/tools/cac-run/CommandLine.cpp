//===- CommandLine.cpp - cac-run's options --------------------------------===//

#include "CacRun.h"

#include "cac/Runtime/Train/Distributed.h"

#include <cstdlib>
#include <iostream>
#include <sstream>
#include <unistd.h>

namespace fs = std::filesystem;

namespace cac::rt::run {

using namespace train;

namespace {

const char *kUsage =
    "usage: cac-run TRAIN.cac [options]\n"
    "\n"
    "Trains a policy as the training file says (docs/training.md).\n"
    "SIGINT, SIGTERM or SIGHUP stops it after the current step with a\n"
    "checkpoint (exit status 128 + the signal; --resume continues); a\n"
    "second one stops it at once (docs/reliability.md).\n"
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
    "                   estimator runs its kernels.ptx); a worker's cuda is\n"
    "                   cuda:LOCAL_RANK, ranks sharing GPUs if fewer\n"
    "  --resume         continue from DIR/checkpoint\n"
    "  --compiler PATH  the `cac` compiler for .cac estimators (default:\n"
    "                   $CAC_COMPILER, else `cac` beside cac-run, else PATH)\n"
    "  --no-progress    no progress bar\n"
    "  --skip-nonfinite a NaN or inf advantage, loss or gradient skips the\n"
    "                   update it would feed (counted as nonfinite_skips)\n"
    "                   instead of stopping the run (docs/reliability.md)\n"
    "  --check          check the training file and the estimator, then exit\n"
    "data parallelism (docs/training.md):\n"
    "  --workers N      N worker processes per node (c10d Gloo), on the CPU\n"
    "                   or, with --device cuda, on the GPUs (several a GPU\n"
    "                   if need be)\n"
    "  --gpus N         N GPU worker processes per node, one a GPU (c10d\n"
    "                   NCCL; needs a LibTorch with NCCL)\n"
    "  --nnodes N       nodes in the job (default 1); start cac-run on each\n"
    "  --node-rank K    this node's index, 0..N-1 (node 0 hosts the store)\n"
    "  --master-addr H  the host of node 0 (default 127.0.0.1)\n"
    "  --master-port P  its TCPStore port (default: a free port on one node,\n"
    "                   29500 on several)\n"
    "  --worker B       run as one rank (B: gloo or nccl) with RANK,\n"
    "                   WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT in\n"
    "                   the environment, as torchrun sets them\n";

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

/// False for a path that cannot be examined at all (a name longer than the
/// system allows, a loop of links): the throwing is_regular_file would end
/// cac-run with an uncaught exception instead of a usage error.
bool isExecutable(const fs::path &p) {
  std::error_code ec;
  return !p.empty() && fs::is_regular_file(p, ec) &&
         access(p.c_str(), X_OK) == 0;
}

/// The checks of --workers N / --gpus N; an exit status on a bad one.
std::optional<int> checkWorkers(const std::string &flag,
                                const CommandLine &cl) {
  if (cl.workers && cl.gpus)
    return usageError("--workers and --gpus exclude each other");
  int64_t n = cl.workers ? *cl.workers : *cl.gpus;
  if (n < 1 || n > 1024)
    return usageError(flag + " must be in [1, 1024]");
  if (cl.workers && !haveGloo())
    return usageError(
        "--workers: this cac-run was built without ProcessGroupGloo "
        "(its LibTorch's Gloo headers were not found), so it has no Gloo "
        "workers");
  if (cl.gpus && !haveNccl())
    return usageError(
        "--gpus: this cac-run was built against a LibTorch without NCCL "
        "(Debian's libtorch is CPU-only), so it has no NCCL workers; use "
        "--workers N for Gloo workers (with --device cuda on GPUs)");
  return std::nullopt;
}

} // namespace

int usageError(const std::string &msg) {
  std::cerr << "cac-run: error: " << msg << "\n" << kUsage;
  return 2;
}

std::optional<int64_t> envCount(const char *name) {
  const char *v = std::getenv(name);
  return v ? parseCount(v) : std::nullopt;
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
std::optional<int> parseCommandLine(const std::vector<std::string> &args,
                                    CommandLine &cl) {
  Overrides &ov = cl.overrides;
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
      cl.compiler = fs::path(v);
    } else if (a == "--resume") {
      cl.opts.resume = true;
    } else if (a == "--no-progress") {
      cl.opts.progress = false;
    } else if (a == "--skip-nonfinite") {
      cl.opts.skipNonFinite = true;
    } else if (a == "--check") {
      cl.check = true;
    } else if (a == "--device") {
      std::string v;
      if (!value(v) || v.empty() || v[0] == '-')
        return usageError("--device needs cpu, cuda or cuda:N");
      cl.deviceSpec = v;
    } else if (a == "--workers" || a == "--gpus") {
      launcherFlag = true;
      if (!count(a == "--workers" ? cl.workers : cl.gpus))
        return 2;
      if (auto rc = checkWorkers(a, cl))
        return rc;
    } else if (a == "--nnodes") {
      launcherFlag = true;
      if (!count(cl.nnodes))
        return 2;
      if (*cl.nnodes < 1 || *cl.nnodes > 4096)
        return usageError("--nnodes must be in [1, 4096]");
    } else if (a == "--node-rank") {
      launcherFlag = true;
      if (!count(cl.nodeRank))
        return 2;
    } else if (a == "--master-port") {
      launcherFlag = true;
      if (!count(cl.masterPort))
        return 2;
      if (*cl.masterPort < 1 || *cl.masterPort > 65535)
        return usageError("--master-port must be in [1, 65535]");
    } else if (a == "--master-addr") {
      launcherFlag = true;
      std::string v;
      if (!value(v) || v.empty())
        return usageError("--master-addr needs a host name or address");
      cl.masterAddr = v;
    } else if (a == "--worker") {
      std::string v;
      if (!value(v) || (v != "gloo" && v != "nccl"))
        return usageError("--worker needs a backend: gloo or nccl");
      cl.workerBackend = v;
    } else if (!a.empty() && a[0] == '-') {
      return usageError("unknown option '" + a + "'");
    } else if (cl.file.empty()) {
      cl.file = a;
    } else {
      return usageError("more than one training file ('" + cl.file + "', '" +
                        a + "')");
    }
    if (!launcherFlag)
      cl.workerArgs.insert(cl.workerArgs.end(), args.begin() + argStart,
                           args.begin() + i + 1);
  }
  return std::nullopt;
}

std::optional<int> resolveDevice(CommandLine &cl) {
  // Checked before anything else, and by the launcher too, so a bad one
  // stops before any worker starts.
  if (cl.gpus && cl.deviceSpec)
    return usageError("--gpus N puts worker r on cuda:r; --device is for one "
                      "process or --workers");
  if (cl.gpus) { // the launcher: its last worker needs a GPU of its own
    std::string err = checkWorkerDevice("cuda", static_cast<int>(*cl.gpus - 1),
                                        false, cl.opts.device);
    return err.empty() ? std::nullopt
                       : std::optional<int>(usageError("--gpus: " + err));
  }
  bool nccl = cl.workerBackend && *cl.workerBackend == "nccl";
  std::string spec = cl.deviceSpec.value_or(nccl ? "cuda" : "cpu");
  // A worker's `cuda` is its local rank's GPU, as --gpus gives it.
  std::string err =
      cl.workerBackend
          ? checkWorkerDevice(
                spec, static_cast<int>(envCount("LOCAL_RANK").value_or(0)),
                !nccl, cl.opts.device)
          : checkDevice(spec, cl.opts.device);
  if (!err.empty())
    return usageError(err);
  if (nccl && !cl.opts.device.is_cuda())
    return usageError("--worker nccl runs on a GPU; --device " + spec +
                      " is for Gloo workers");
  return std::nullopt;
}

} // namespace cac::rt::run
