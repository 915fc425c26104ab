//===- Compile.cpp - cac compile ------------------------------------------===//

#include "Tool.h"

#include "cac/DSL/AST.h"
#include "cac/DSL/Sema.h"
#include "cac/Driver/Driver.h"
#include "cac/Target/Target.h"

#include "mlir/IR/OperationSupport.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace cac::tool {

namespace {

int printModule(const ToolOptions &opts, ModuleOp m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  OpPrintingFlags flags;
  m.print(os, flags);
  return writeOutput(opts, os.str()) ? 0 : 1;
}

/// PTX (the default) and the manifest come from the CUDA pipeline; a bundle
/// adds the CPU pipeline's host.so.
int compileToPtx(const ToolOptions &opts, MLIRContext &ctx, ModuleOp module) {
  const KernelOptions &k = opts.kernels;
  OwningOpRef<ModuleOp> cpuModule;
  if (!opts.bundleDir.empty())
    cpuModule = module.clone();
  if (failed(runPipeline(ctx, module, [&](OpPassManager &pm) {
        buildCudaPipeline(pm, k);
      })))
    return 1;
  auto ptx = extractPtx(module);
  auto manifest = extractManifest(module);
  if (failed(ptx) || failed(manifest))
    return 1;
  if (!opts.bundleDir.empty()) {
    if (failed(runPipeline(ctx, *cpuModule, [&](OpPassManager &pm) {
          buildCpuPipeline(pm, k);
        })))
      return 1;
    if (failed(
            writeBundle(opts.bundleDir, *manifest, *ptx, *cpuModule, opts.cpu)))
      return 1;
  }
  if (opts.emit == Emit::Manifest)
    return writeOutput(opts, *manifest) ? 0 : 1;
  if (opts.bundleDir.empty() || opts.outputFile != "-" ||
      opts.emit == Emit::Ptx)
    return writeOutput(opts, *ptx) ? 0 : 1;
  return 0;
}

} // namespace

int runCompile(const ToolOptions &opts, Source &src) {
  if (opts.emit == Emit::Ast) {
    auto est = parseAndAnalyze(src.sourceMgr, src.bufferId, src.ctx);
    if (!est)
      return 1;
    std::string s;
    llvm::raw_string_ostream os(s);
    ast::dump(*est, os);
    return writeOutput(opts, os.str()) ? 0 : 1;
  }
  auto module = compileToCac(src.sourceMgr, src.bufferId, src.ctx, opts.useF64);
  if (!module)
    return 1;
  switch (opts.emit) {
  case Emit::Mlir:
    return printModule(opts, *module);
  case Emit::Kernels:
    if (failed(runPipeline(src.ctx, *module, buildCacOptimizationPipeline)))
      return 1;
    return printModule(opts, *module);
  case Emit::Llvm: {
    if (failed(runPipeline(src.ctx, *module, [&](OpPassManager &pm) {
          buildCpuPipeline(pm, opts.kernels);
        })))
      return 1;
    auto ir = emitLlvmIr(*module, opts.cpu);
    return succeeded(ir) && writeOutput(opts, *ir) ? 0 : 1;
  }
  default:
    return compileToPtx(opts, src.ctx, *module);
  }
}

} // namespace cac::tool
