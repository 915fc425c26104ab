//===- Pipelines.h - The pass pipelines of cac ------------------*- C++ -*-===//
//
// One builder per pipeline, shared by `cac` and `cac-opt` (where they are
// registered as `cac-to-cpu` and `cac-to-ptx`).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_PIPELINES_H
#define CAC_PIPELINES_H

#include "cac/Conversion/Passes.h"

#include "mlir/Pass/PassManager.h"

#include <string>

namespace cac {

/// The options of the kernel pipelines. The lowering's own options (block
/// shapes, layout, prefetch, ...) are the ODS options of cac-lower-kernels
/// (cac/Conversion/Passes.td), declared there once and checked by
/// lowerKernelsOptionsError; each pipeline sets `lower.target`.
struct KernelOptions {
  CacLowerKernelsOptions lower;
  /// Group kernels that read only inputs are computed inside the seq kernels
  /// that read them: the pipelines run cac-fuse-groups after the partition
  /// (every target: host.so and the PTX share a manifest).
  bool fuseGroups = true;
  /// The CUDA pipeline's chip and the libdevice bitcode linked for math
  /// functions (empty: the CUDA default).
  std::string chip = "sm_90";
  std::string libdevice;
};

/// cac dialect -> partitioned cac dialect (canonicalize, CSE, partition).
void buildCacOptimizationPipeline(mlir::OpPassManager &pm);

/// Partitioned cac -> LLVM dialect functions taking `void**` (CPU).
void buildCpuPipeline(mlir::OpPassManager &pm);
/// The same with the options the CPU pipeline honours (fuseGroups).
void buildCpuPipeline(mlir::OpPassManager &pm, const KernelOptions &options);

/// Partitioned cac -> gpu.binary holding PTX.
void buildCudaPipeline(mlir::OpPassManager &pm, const KernelOptions &options);

/// Partitioned cac -> LLVM dialect CPU functions in which the GPU's block
/// kernels run as `seqBlock` cooperating CPU threads (`cac eval --backend
/// gpu-sim`): the GPU's algorithms, tested without a GPU.
void buildCudaSimPipeline(mlir::OpPassManager &pm,
                          const KernelOptions &options);

/// Registers the pipelines and every cac pass with the global registry.
void registerCacPasses();

/// The libdevice.10.bc of the CUDA toolkit, or "" when none is found.
std::string findLibdevice();

/// "" when LLVM's NVPTX back end knows GPU architecture `chip`, else an
/// error that lists the ones it knows (an unknown one would abort the PTX
/// back end).
std::string nvptxChipError(llvm::StringRef chip);

} // namespace cac

#endif // CAC_PIPELINES_H
