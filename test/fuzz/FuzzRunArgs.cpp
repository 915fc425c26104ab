//===- FuzzRunArgs.cpp - libFuzzer target over cac-run's command line -----===//
//
// cac-fuzz-runargs: what cac-run's main does with its arguments before it
// reads the training file: parseCommandLine (every option, its value and
// its range, the launcher's flags and the arguments passed on to workers),
// resolveDevice (--device, --gpus, a worker's LOCAL_RANK) and the overrides
// applied to a training config. An input is the argument list, the
// arguments separated by NUL bytes (argv's strings hold none). A bad command
// line is exit status 2 with a message (the messages and --help's usage go
// to stderr and stdout, which run.sh closes: -close_fd_mask=3); a crash, a
// sanitizer report, an exception or a hang is a bug, and so is a command
// line that parses with a value out of the range its option promises.
//
//===----------------------------------------------------------------------===//

#include "../../runtime/tools/cac-run/CacRun.h"
#include "FuzzInput.h"

#include <cstdint>
#include <string>
#include <vector>

using namespace cac::rt::run;
using namespace cac::rt::train;

namespace {

void require(bool ok) {
  if (!ok)
    __builtin_trap();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::vector<std::string> args = cac::fuzz::splitArguments(data, size, 256);
  CommandLine cl;
  if (std::optional<int> rc = parseCommandLine(args, cl)) {
    require(*rc == 0 || *rc == 2);
    return 0;
  }
  if (std::optional<int> rc = resolveDevice(cl)) {
    require(*rc == 2);
    return 0;
  }
  const Overrides &o = cl.overrides;
  require(!o.threads || (*o.threads >= 0 && *o.threads <= 1024));
  for (const auto *n : {&o.steps, &o.sftSteps, &o.evalEvery, &o.seed})
    require(!*n || **n >= 0);
  require(!cl.nnodes || (*cl.nnodes >= 1 && *cl.nnodes <= 4096));
  require(!cl.masterPort || (*cl.masterPort >= 1 && *cl.masterPort <= 65535));
  require(!cl.workerBackend || *cl.workerBackend == "gloo" ||
          *cl.workerBackend == "nccl");
  require(!(cl.workers && cl.gpus));
  require(cl.opts.device.is_cpu() || cl.opts.device.is_cuda());
  require(cl.workerArgs.size() <= args.size());
  TrainConfig config;
  applyOverrides(config, o);
  require(!o.steps || config.steps == *o.steps);
  require(!o.out || config.out == *o.out);
  return 0;
}
