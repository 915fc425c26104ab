//===- Pipelines.h - The pass pipelines of cac ------------------*- C++ -*-===//
//
// One builder per pipeline, shared by `cac` and `cac-opt` (where they are
// registered as `cac-to-cpu` and `cac-to-ptx`).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_PIPELINES_H
#define CAC_PIPELINES_H

#include "mlir/Pass/PassManager.h"

#include <string>

namespace cac {

/// Options of the CUDA pipeline.
struct CudaOptions {
  std::string chip = "sm_90";
  /// libdevice bitcode linked for math functions; empty = the CUDA default.
  std::string libdevice;
  /// Threads per block for kernels with one thread per unit (group, node).
  int64_t blockSize = 128;
  /// Threads per block of the block-per-sequence seq kernels (a power of 2;
  /// 0: one thread per sequence) and consecutive tokens per thread in a tile.
  int64_t seqBlock = 128;
  int64_t seqItems = 4;
  /// Which tokens of a tile a thread takes: "blocked" (seqItems consecutive
  /// ones), "striped" (token j * seqBlock + tid for each j) or "auto"
  /// (striped in loops without a scan, blocked in the others).
  std::string seqLayout = "auto";
  /// Blocks of a seq kernel that must fit on one SM at once (PTX
  /// .minnctapersm, which bounds the registers); 0: no bound.
  int64_t seqMinBlocks = 0;
  /// Each tile of a seq kernel asks L2 for the next tile's tokens.
  bool seqPrefetch = true;
  /// With seqPrefetch, also the buffers the kernel wrote in an earlier loop.
  bool seqPrefetchWritten = true;
  /// Group kernels that read only inputs are computed inside the seq kernels
  /// that read them: the pipelines run cac-fuse-groups after the partition
  /// (every target: host.so and the PTX share a manifest).
  bool fuseGroups = true;
};

/// cac dialect -> partitioned cac dialect (canonicalize, CSE, partition).
void buildCacOptimizationPipeline(mlir::OpPassManager &pm);

/// Partitioned cac -> LLVM dialect functions taking `void**` (CPU).
void buildCpuPipeline(mlir::OpPassManager &pm);
/// The same with the options the CPU pipeline honours (fuseGroups).
void buildCpuPipeline(mlir::OpPassManager &pm, const CudaOptions &options);

/// Partitioned cac -> gpu.binary holding PTX.
void buildCudaPipeline(mlir::OpPassManager &pm, const CudaOptions &options);

/// Partitioned cac -> LLVM dialect CPU functions in which the GPU's block
/// kernels run as `seqBlock` cooperating CPU threads (`cac eval --backend
/// gpu-sim`): the GPU's algorithms, tested without a GPU.
void buildCudaSimPipeline(mlir::OpPassManager &pm,
                          const CudaOptions &options);

/// Registers the pipelines and every cac pass with the global registry.
void registerCacPasses();

/// The libdevice.10.bc of the CUDA toolkit, or "" when none is found.
std::string findLibdevice();

} // namespace cac

#endif // CAC_PIPELINES_H
