//===- CacRun.h - cac-run's command line and actions ------------*- C++ -*-===//
//
// cac-run parses its command line (CommandLine.cpp), reads the training
// file, and runs one action: start this node's workers (Launch.cpp), or
// train (Train.cpp: one process, one worker rank, or --check).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_TOOLS_CAC_RUN_CACRUN_H
#define CAC_TOOLS_CAC_RUN_CACRUN_H

#include "cac/Runtime/Train/TrainFile.h"
#include "cac/Runtime/Train/Trainer.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace cac::rt::run {

/// What the command line asks for.
struct CommandLine {
  std::string file;
  train::Overrides overrides;
  train::TrainerOptions opts;
  bool check = false;
  std::optional<std::filesystem::path> compiler;
  /// Data parallelism: the launcher's flags (not passed on to the workers)
  /// and the worker entry (--worker BACKEND).
  std::optional<int64_t> workers, gpus, nnodes, nodeRank, masterPort;
  std::optional<std::string> masterAddr, workerBackend, deviceSpec;
  /// The arguments each worker gets: these, less the launcher's flags.
  std::vector<std::string> workerArgs;

  /// A launcher flag is given (and not --check): start the workers.
  bool launches() const {
    return (workers || gpus || nnodes || nodeRank || masterAddr ||
            masterPort) &&
           !check;
  }
};

/// Prints \p msg and the usage to stderr; returns 2.
int usageError(const std::string &msg);
/// A non-negative integer from the environment variable \p name.
std::optional<int64_t> envCount(const char *name);

/// Parses \p args into \p cl; returns the exit status where the process
/// ends here (--help: 0, a bad command line: 2).
std::optional<int> parseCommandLine(const std::vector<std::string> &args,
                                    CommandLine &cl);
/// Sets cl.opts.device: --device (a worker's `cuda` is its local rank's GPU,
/// rankGpu), else an NCCL worker's cuda:LOCAL_RANK, else the CPU; the
/// launcher of --gpus N checks that the node has N GPUs. Returns the exit
/// status of a bad one.
std::optional<int> resolveDevice(CommandLine &cl);
/// The `cac` compiler: $CAC_COMPILER, else beside cac-run, else on PATH.
std::filesystem::path findCompiler();

/// The launcher: starts this node's workers (this binary with --worker)
/// and waits for them; returns the exit status.
int launch(const CommandLine &cl, const train::TrainConfig &cfg);
/// Trains (or checks) in this process: alone, or as the worker rank the
/// environment describes; returns the exit status.
int train(const CommandLine &cl, const train::TrainConfig &cfg,
          train::DiagnosticEngine &diag);

/// Prints the stack of a crash before the process dies of it.
void installCrashReporter();

} // namespace cac::rt::run

#endif // CAC_TOOLS_CAC_RUN_CACRUN_H
