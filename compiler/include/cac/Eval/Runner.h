//===- Runner.h - Run compiled CPU kernels on a batch -----------*- C++ -*-===//

#ifndef CAC_EVAL_RUNNER_H
#define CAC_EVAL_RUNNER_H

#include "cac/Abi/Manifest.h"
#include "cac/Eval/Batch.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <optional>

namespace cac {

/// Reads a manifest.json text (abi/include/cac/Abi/ManifestReader.h); the
/// error names the field that is wrong.
llvm::Expected<abi::Manifest> parseManifest(llvm::StringRef json);

/// Runs the kernels of a manifest on a batch through `lookup`, which maps a
/// kernel name to its entry: `void(void**)` for a kernel with one thread per
/// unit, run over all units; for a block kernel of the GPU simulation
/// (target cuda-sim), `void(void**, int64_t tid, void *shared, void
/// *barrier)`, run by `block` simulated threads (simulateBlock) that meet in
/// `cac_sim_barrier`. Returns the outputs in manifest order. Checks that
/// every input of the manifest is in the batch, and that the threads of a
/// block reach the same barriers.
llvm::Expected<std::vector<OutputArray>>
runCpuKernels(const abi::Manifest &manifest,
              llvm::function_ref<void *(llvm::StringRef)> lookup,
              const Batch &batch);

/// The host functions that simulated block kernels call, for the JIT.
std::vector<std::pair<llvm::StringRef, void *>> simulationSymbols();

/// Runs `threads` simulated threads of one GPU block cooperatively on the
/// calling OS thread: `body(tid, barrier)` for each, where a call of
/// `simulationBarrier(barrier)` (the kernels' `cac_sim_barrier`) returns once
/// every thread of the block has reached it, and `simulationWarpBarrier(
/// barrier)` (`cac_sim_warp_barrier`, in a shuffle) once every thread of the
/// caller's warp (min(32, threads) consecutive tids) has. Fails when the
/// threads reached different barriers (some returned while others waited,
/// or a warp split between barriers).
llvm::Error simulateBlock(int64_t threads,
                          llvm::function_ref<void(int64_t tid, void *barrier)>
                              body);
void simulationBarrier(void *barrier);
void simulationWarpBarrier(void *barrier);

} // namespace cac

#endif // CAC_EVAL_RUNNER_H
