//===- Pipelines.cpp - The pass pipelines of cac --------------------------===//

#include "cac/Pipelines.h"
#include "cac/Conversion/Passes.h"
#include "cac/Dialect/Cac/Transforms/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/Transforms/Passes.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/TargetSelect.h"

#include <memory>

using namespace mlir;

void cac::buildCacOptimizationPipeline(OpPassManager &pm) {
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addNestedPass<ir::EstimatorOp>(ir::createCacPartition());
}

static cac::CacLowerKernelsOptions lowerOptions(StringRef target,
                                                const cac::KernelOptions &o) {
  cac::CacLowerKernelsOptions l = o.lower;
  l.target = target.str();
  return l;
}

/// The kernels' SCF/arith/LLVM-dialect IR to the LLVM dialect. `canonicalize`
/// is off for the simulated GPU: its block kernels hold long flat loop bodies
/// (a warp shuffle is a store, two barrier calls and a load), and MLIR's
/// greedy rewriter re-checks a whole body for deadness whenever an op inside
/// it changes, quadratic in the body's length. The JIT's LLVM -O3 does the
/// same folding (docs/pipeline.md).
static void addLlvmLowering(OpPassManager &pm, bool canonicalize = true) {
  if (canonicalize)
    pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addPass(createLoopInvariantCodeMotionPass());
  pm.addPass(createConvertSCFToCFPass());
  pm.addPass(createConvertToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
}

/// The optimization pipeline, then group fusion when it is on.
static void addKernelPipeline(OpPassManager &pm, const cac::KernelOptions &o) {
  cac::buildCacOptimizationPipeline(pm);
  if (o.fuseGroups)
    pm.addNestedPass<cac::ir::EstimatorOp>(cac::ir::createCacFuseGroups());
}

void cac::buildCudaSimPipeline(OpPassManager &pm,
                               const KernelOptions &options) {
  addKernelPipeline(pm, options);
  pm.addPass(createCacLowerKernels(lowerOptions("cuda-sim", options)));
  addLlvmLowering(pm, /*canonicalize=*/false);
}

void cac::buildCpuPipeline(OpPassManager &pm) {
  buildCpuPipeline(pm, KernelOptions{});
}

void cac::buildCpuPipeline(OpPassManager &pm, const KernelOptions &options) {
  addKernelPipeline(pm, options);
  pm.addPass(createCacLowerKernels(lowerOptions("cpu", options)));
  pm.addPass(createCacCpuMath());
  addLlvmLowering(pm);
}

void cac::buildCudaPipeline(OpPassManager &pm, const KernelOptions &options) {
  addKernelPipeline(pm, options);
  pm.addPass(createCacLowerKernels(lowerOptions("cuda", options)));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addPass(createLoopInvariantCodeMotionPass());
  GpuNVVMAttachTargetOptions attach;
  attach.chip = options.chip;
  attach.optLevel = 3;
  std::string libdevice =
      options.libdevice.empty() ? findLibdevice() : options.libdevice;
  std::vector<std::string> libs;
  if (!libdevice.empty())
    libs.push_back(libdevice);
  attach.linkLibs = libs;
  pm.addPass(createGpuNVVMAttachTarget(attach));
  OpPassManager &gpm = pm.nest<gpu::GPUModuleOp>();
  gpm.addPass(createConvertSCFToCFPass());
  ConvertGpuOpsToNVVMOpsOptions nvvm;
  gpm.addPass(createConvertGpuOpsToNVVMOps(nvvm));
  gpm.addPass(createCanonicalizerPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  GpuModuleToBinaryPassOptions bin;
  bin.compilationTarget = "isa";
  pm.addPass(createGpuModuleToBinaryPass(bin));
}

std::string cac::findLibdevice() {
  std::vector<std::string> roots;
  if (auto env = llvm::sys::Process::GetEnv("CUDA_HOME"))
    roots.push_back(*env);
  roots.push_back("/usr/local/cuda");
  roots.push_back("/usr/lib/cuda");
  for (const std::string &r : roots) {
    std::string p = r + "/nvvm/libdevice/libdevice.10.bc";
    if (llvm::sys::fs::exists(p))
      return p;
  }
  return "";
}

std::string cac::nvptxChipError(llvm::StringRef chip) {
  LLVMInitializeNVPTXTargetInfo();
  LLVMInitializeNVPTXTargetMC();
  const char *triple = "nvptx64-nvidia-cuda";
  std::string err;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!target)
    return "--arch: LLVM has no NVPTX back end: " + err;
  std::unique_ptr<llvm::MCSubtargetInfo> sti(
      target->createMCSubtargetInfo(triple, "", ""));
  if (sti && sti->isCPUStringValid(chip))
    return "";
  std::string known;
  if (sti)
    for (const llvm::SubtargetSubTypeKV &kv :
         sti->getAllProcessorDescriptions())
      known += (known.empty() ? "" : ", ") + std::string(kv.Key);
  return "--arch: unknown GPU architecture '" + chip.str() +
         "'; this LLVM's PTX back end supports " + known;
}

/// Registers a kernel pipeline for cac-opt with the options of `cac compile`:
/// `fuse-groups` (the pipeline's own) and every option of cac-lower-kernels
/// but its target, which the lowering pass parses itself (their one
/// declaration): `cac-to-ptx{seq-block=64 fuse-groups=false}`.
static void registerKernelPipeline(StringRef name, StringRef description,
                                   void (*build)(OpPassManager &,
                                                 const cac::KernelOptions &)) {
  auto function =
      [build](
          OpPassManager &pm, StringRef options,
          function_ref<LogicalResult(const Twine &)> error) -> LogicalResult {
    cac::KernelOptions o;
    std::string lowering;
    SmallVector<StringRef> words;
    options.split(words, ' ', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
    for (StringRef word : words) {
      auto [key, value] = word.split('=');
      if (key == "target")
        return error("the pipeline sets cac-lower-kernels' target");
      if (key != "fuse-groups") {
        lowering += (lowering.empty() ? "" : " ") + word.str();
        continue;
      }
      if (value.empty() || value == "true" || value == "1")
        o.fuseGroups = true;
      else if (value == "false" || value == "0")
        o.fuseGroups = false;
      else
        return error("fuse-groups must be true or false, not '" + value + "'");
    }
    build(pm, o);
    for (Pass &pass : pm.getPasses())
      if (pass.getArgument() == "cac-lower-kernels")
        return pass.initializeOptions(lowering, error);
    return success();
  };
  registerPassPipeline(name, description, function,
                       [](function_ref<void(const detail::PassOptions &)>) {});
}

void cac::registerCacPasses() {
  ir::registerCacTransformsPasses();
  registerCacConversionPasses();
  registerKernelPipeline("cac-to-cpu",
                         "Lower a cac estimator to LLVM dialect CPU kernels",
                         buildCpuPipeline);
  registerKernelPipeline("cac-to-ptx", "Lower a cac estimator to PTX for sm_90",
                         buildCudaPipeline);
  registerKernelPipeline(
      "cac-to-gpu-sim",
      "Lower a cac estimator to CPU functions that simulate its GPU blocks",
      buildCudaSimPipeline);
}
