//===- Train.cpp - cac-run's training: one process or one worker rank -----===//

#include "CacRun.h"

#include "cac/Runtime/Train/Distributed.h"

#include <csignal>
#include <cstdlib>
#include <iostream>

namespace cac::rt::run {

using namespace train;

namespace {

/// Joins the job the environment describes (torchrun's variables), its
/// collectives on \p device (the worker's); null after an error message.
std::unique_ptr<Communicator> joinJob(const std::string &backend,
                                      c10::Device device) {
  DistOptions d;
  d.device = device;
  d.backend = backend == "nccl" ? DistBackend::Nccl : DistBackend::Gloo;
  auto rank = envCount("RANK"), world = envCount("WORLD_SIZE");
  auto port = envCount("MASTER_PORT");
  const char *addr = std::getenv("MASTER_ADDR");
  if (!rank || !world || !port || !addr || !*addr) {
    std::cerr << "cac-run: error: --worker needs RANK, WORLD_SIZE, "
                 "MASTER_ADDR and MASTER_PORT in the environment (as "
                 "torchrun sets them; --workers N sets them for you)\n";
    return nullptr;
  }
  d.rank = static_cast<int>(*rank);
  d.worldSize = static_cast<int>(*world);
  d.masterAddr = addr;
  d.masterPort = static_cast<int>(*port);
  try {
    return Communicator::connect(d);
  } catch (const std::exception &e) {
    std::cerr << "cac-run: error: " << e.what() << "\n";
    return nullptr;
  }
}

} // namespace

int train(const CommandLine &cl, const TrainConfig &cfg,
          DiagnosticEngine &diag) {
  TrainerOptions opts = cl.opts;
  std::unique_ptr<Communicator> comm;
  if (cl.workerBackend && !cl.check) {
    comm = joinJob(*cl.workerBackend, opts.device);
    if (!comm)
      return 1;
    opts.dist = comm.get();
  }
  try {
    Trainer trainer(cfg, opts);
    bool ok = trainer.prepare(diag);
    // Every rank checks the same file; rank 0 reports.
    if (!comm || comm->rank() == 0)
      std::cerr << diag.render();
    if (!ok)
      return 1;
    if (cl.check) {
      std::cerr << cl.file << ": ok\n";
      return 0;
    }
    trainer.run();
  } catch (const TrainStopped &e) {
    // Every rank stops at the same step; rank 0 says so.
    if (!comm || comm->rank() == 0)
      std::cerr << "cac-run: " << e.what() << " (cac-run " << cl.file
                << " --resume ...)\n";
    return 128 + (e.signal() ? e.signal() : SIGTERM);
  } catch (const std::exception &e) {
    std::cerr << "cac-run: error: "
              << (comm ? "worker " + std::to_string(comm->rank()) + ": " : "")
              << e.what() << "\n";
    return 1;
  }
  return 0;
}

} // namespace cac::rt::run
