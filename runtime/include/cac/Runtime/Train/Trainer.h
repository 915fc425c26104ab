//===- Trainer.h - The RL training loop of cac-run --------------*- C++ -*-===//
//
// One run of a TrainConfig (docs/training.md):
//
//   1. optional SFT warm start on the task's worked solutions;
//   2. RL steps: sample prompts, generate a group of rollouts per prompt,
//      reward them by the exact answer check, pack the batch, run the
//      estimator bundle (host.so on the CPU, kernels.ptx on a GPU) for
//      token advantages (and critic returns),
//      then PPO epochs over minibatches: clipped surrogate against the logp
//      recorded at generation, the chosen aggregation, optional KL to the
//      frozen policy at RL start, clipped value loss for a critic, AdamW
//      with gradient clipping and the learning-rate schedule;
//   3. greedy held-out evaluation at RL start, every `eval.every` RL steps
//      and at the end.
//
// Metrics go to OUT/metrics.{jsonl,csv} and OUT/plot.png, checkpoints to
// OUT/checkpoint (atomic; --resume continues from it), and the final policy
// to OUT/final as a Hugging Face folder.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TRAIN_TRAINER_H
#define CAC_RUNTIME_TRAIN_TRAINER_H

#include "cac/Runtime/Train/Diagnostics.h"
#include "cac/Runtime/Train/TrainFile.h"

#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cac::rt::train {

class Communicator;

/// An error that stops a run (I/O, a malformed checkpoint, a failed
/// compile); the message is for the user.
class TrainError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The run stopped at a stop signal after a step, with a checkpoint of that
/// step written (docs/reliability.md).
class TrainStopped : public TrainError {
public:
  TrainStopped(const std::string &message, int signal)
      : TrainError(message), signal_(signal) {}
  /// The signal this process received (0: another worker's).
  int signal() const { return signal_; }

private:
  int signal_;
};

struct TrainerOptions {
  /// Continue from OUT/checkpoint.
  bool resume = false;
  /// The `cac` compiler used for `.cac` estimators (empty: none available;
  /// a bundle folder must be given then).
  std::filesystem::path compiler;
  /// Show the progress bar on stderr.
  bool progress = true;
  /// Stop after this many steps of this process, as if killed (tests).
  int64_t stopAfterSteps = -1;
  /// Print one summary line per phase to stderr.
  bool verbose = true;
  /// A non-finite advantage, loss or gradient skips the update it would
  /// feed (counted in the metrics as nonfinite_skips) instead of stopping
  /// the run (cac-run --skip-nonfinite).
  bool skipNonFinite = false;
  /// The process group of a data-parallel run (not owned; null: this
  /// process trains alone). Every rank runs the same configuration; rank 0
  /// alone writes metrics, plots, checkpoints and the final model.
  Communicator *dist = nullptr;
  /// Where the models, the batches, the estimator and the update run: the
  /// CPU, or a CUDA device (the LibTorch must have CUDA, and the estimator
  /// bundle a kernels.ptx). Rollouts, rewards and checkpoints pass through
  /// the host; sampling draws its uniforms on the CPU on every device.
  c10::Device device{c10::kCPU};
};

/// Parses a --device value ("cpu", "cuda", "cuda:N") and checks that this
/// LibTorch can use it; returns an error message for the user, or empty.
std::string checkDevice(const std::string &spec, c10::Device &out);

/// The GPU of the data-parallel worker of local rank \p localRank (its rank
/// on this node) on a node with \p gpus CUDA devices: cuda:localRank, the
/// same mapping for every backend. With fewer GPUs than ranks, \p share
/// (Gloo) puts the ranks on the GPUs in turn, cuda:(localRank mod gpus);
/// without it (NCCL refuses two ranks on one device), or without a GPU, the
/// rank has none: nullopt.
std::optional<c10::Device> rankGpu(int localRank, int64_t gpus, bool share);

/// checkDevice for a data-parallel worker of local rank \p localRank:
/// `cuda` without an index is the rank's own GPU (rankGpu, shared with
/// other ranks when \p share allows); `cpu` and `cuda:N` are kept as they
/// are. Returns an error message for the user, or empty.
std::string checkWorkerDevice(const std::string &spec, int localRank,
                              bool share, c10::Device &out);

/// Runs a training configuration.
class Trainer {
public:
  Trainer(TrainConfig config, TrainerOptions options);
  ~Trainer();

  /// Builds everything the run needs: the tokenizer, task, models, and the
  /// estimator bundle (compiling the .cac file). Problems that belong to a
  /// field of the training file (an unknown estimator parameter, a critic
  /// the estimator does not read, ...) are reported to \p diag at that field;
  /// returns false then. I/O and compile failures throw TrainError.
  bool prepare(DiagnosticEngine &diag);

  /// Runs (or resumes) the SFT and RL phases; throws TrainError.
  void run();

  /// The metrics rows of the run so far (including resumed ones).
  const std::vector<nlohmann::json> &metrics() const;

  /// The held-out accuracy at RL start and at the end (NaN if not run).
  double evalAccAtRlStart() const;
  double evalAccAtEnd() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The learning-rate multiplier of \p schedule at 0-based \p step of
/// \p total steps (linear warmup, then constant or cosine to min_ratio).
double scheduleFactor(const ScheduleSpec &schedule, int64_t step,
                      int64_t total);

} // namespace cac::rt::train

#endif // CAC_RUNTIME_TRAIN_TRAINER_H
