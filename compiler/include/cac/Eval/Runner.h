//===- Runner.h - Run compiled CPU kernels on a batch -----------*- C++ -*-===//

#ifndef CAC_EVAL_RUNNER_H
#define CAC_EVAL_RUNNER_H

#include "cac/Eval/Batch.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <optional>

namespace cac {

/// What the manifest says about an estimator's interface.
struct ManifestInfo {
  std::string estimator;
  std::string dtype;
  struct BufferInfo {
    std::string name, role, domain;
    /// For seg buffers: "by-segment" (segment j of sequence b at
    /// seq_offsets[b] + j) or "by-token" (the segment's value on each of its
    /// tokens).
    std::string layout;
  };
  std::vector<BufferInfo> buffers;
  std::vector<std::pair<std::string, std::optional<double>>> params;
  struct KernelInfo {
    std::string name, grid;
    int64_t block = 128;
  };
  std::vector<KernelInfo> kernels;
  std::vector<std::pair<std::string, std::string>> args; ///< name, kind
  /// The manifest's "needs" holds "tree".
  bool needsTree = false;
};

/// Parses and validates a manifest.json text.
llvm::Expected<ManifestInfo> parseManifest(llvm::StringRef json);

/// Runs the kernels of a manifest on a batch through `lookup`, which maps a
/// kernel name to its `void(void**)` entry. Returns the outputs in manifest
/// order. Checks that every input of the manifest is in the batch.
llvm::Expected<std::vector<OutputArray>>
runCpuKernels(const ManifestInfo &manifest,
              llvm::function_ref<void (*(llvm::StringRef))(void **)> lookup,
              const Batch &batch);

} // namespace cac

#endif // CAC_EVAL_RUNNER_H
