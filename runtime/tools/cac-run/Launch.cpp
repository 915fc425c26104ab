//===- Launch.cpp - cac-run --workers N / --gpus N: the launcher ----------===//

#include "CacRun.h"

#include "cac/Runtime/Support/StopSignals.h"
#include "cac/Runtime/Train/Distributed.h"

#include <iostream>

namespace fs = std::filesystem;

namespace cac::rt::run {

using namespace train;

int launch(const CommandLine &cl, const TrainConfig &cfg) {
  if (cl.workerBackend)
    return usageError("--worker runs one rank; it takes none of --workers, "
                      "--gpus, --nnodes, --node-rank, --master-addr, "
                      "--master-port (use the environment instead)");
  if (!cl.workers && !cl.gpus)
    return usageError("--nnodes/--node-rank/--master-addr/--master-port "
                      "need --workers N or --gpus N");
  LaunchPlan plan;
  plan.nprocs = static_cast<int>(cl.workers ? *cl.workers : *cl.gpus);
  plan.nnodes = static_cast<int>(cl.nnodes.value_or(1));
  plan.nodeRank = static_cast<int>(cl.nodeRank.value_or(0));
  if (plan.nodeRank >= plan.nnodes)
    return usageError("--node-rank " + std::to_string(plan.nodeRank) +
                      " is not below --nnodes " + std::to_string(plan.nnodes));
  if (plan.nnodes > 1 && !cl.masterAddr)
    return usageError("--nnodes " + std::to_string(plan.nnodes) +
                      " needs --master-addr (the host of node 0)");
  plan.masterAddr = cl.masterAddr.value_or("127.0.0.1");
  try {
    plan.masterPort = cl.masterPort     ? static_cast<int>(*cl.masterPort)
                      : plan.nnodes > 1 ? 29500
                                        : pickFreePort();
  } catch (const std::exception &e) {
    std::cerr << "cac-run: error: " << e.what() << "\n";
    return 1;
  }
  int world = plan.nprocs * plan.nnodes;
  if (cfg.steps > 0 && cfg.prompts < world) {
    std::cerr << "cac-run: error: " << world
              << " workers need at least as many prompts per step (the "
                 "training file sets prompts = "
              << cfg.prompts << ")\n";
    return 1;
  }
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) {
    std::cerr << "cac-run: error: cannot find this executable: " << ec.message()
              << "\n";
    return 1;
  }
  plan.argv = {self.string()};
  plan.argv.insert(plan.argv.end(), cl.workerArgs.begin(), cl.workerArgs.end());
  plan.argv.push_back("--worker");
  plan.argv.push_back(cl.gpus ? "nccl" : "gloo");
  // The launcher passes a stop signal on to its workers and kills them at
  // a second one (launchWorkers).
  StopHandlerOptions stop;
  stop.restartCalls = false;
  stop.secondStopsAtOnce = false;
  installStopHandlers(stop);
  return launchWorkers(plan);
}

} // namespace cac::rt::run
