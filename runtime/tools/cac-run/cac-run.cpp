//===- cac-run.cpp - Train a policy as a training file says ---------------===//
//
//   cac-run TRAIN.cac [--steps N] [--sft-steps N] [--eval-every N]
//                     [--seed N] [--out DIR] [--threads N] [--resume]
//                     [--compiler PATH] [--no-progress] [--check]
//                     [--skip-nonfinite]
//                     [--device cpu|cuda|cuda:N]
//                     [--workers N | --gpus N] [--nnodes N] [--node-rank K]
//                     [--master-addr HOST] [--master-port P]
//   cac-run TRAIN.cac ... --worker gloo|nccl     (one rank; torchrun's env)
//
// Exit status: 0 on success, 1 on a diagnostic or a run error, 2 on a bad
// command line, 128 + N after a stop signal N (a checkpoint written). See docs/training.md. The actions: Launch.cpp (the
// launcher of --workers / --gpus) and Train.cpp (one process, one worker
// rank, --check).
//
//===----------------------------------------------------------------------===//

#include "CacRun.h"

#include "cac/Runtime/Support/StopSignals.h"

#include <fstream>
#include <iostream>
#include <sstream>

using namespace cac::rt::run;
using namespace cac::rt::train;

int main(int argc, char **argv) {
  installCrashReporter();
  CommandLine cl;
  if (auto rc = parseCommandLine({argv + 1, argv + argc}, cl))
    return *rc;
  if (auto rc = resolveDevice(cl))
    return *rc;
  if (cl.file.empty())
    return usageError("no training file (try examples/arith/train.cac)");

  std::ifstream in(cl.file, std::ios::binary);
  if (!in) {
    std::cerr << cl.file << ": error: cannot read the training file\n";
    return 1;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  DiagnosticEngine diag(cl.file, ss.str());
  auto block = parseTrainFile(ss.str(), diag);
  std::optional<TrainConfig> cfg;
  if (block)
    cfg = buildTrainConfig(*block, cl.file, diag);
  if (!cfg) {
    std::cerr << diag.render();
    return 1;
  }
  applyOverrides(*cfg, cl.overrides);
  cl.opts.compiler = cl.compiler ? *cl.compiler : findCompiler();
  if (cl.launches())
    return launch(cl, *cfg);
  // The first stop signal ends the run after its step; a worker's launcher
  // forwards its own, which must not count as a second one.
  cac::rt::StopHandlerOptions stop;
  stop.parentForwards = cl.workerBackend.has_value();
  cac::rt::installStopHandlers(stop);
  return train(cl, *cfg, diag);
}
