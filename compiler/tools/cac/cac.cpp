//===- cac.cpp - The cac command line -------------------------------------===//
//
//   cac compile FILE -o OUT.ptx [--arch sm_90] [--bundle DIR] [--f64]
//   cac compile FILE --emit=ast|mlir|kernels|llvm|ptx [-o OUT]
//   cac eval FILE --input batch.json [--param NAME=VALUE]...
//            [--backend cpu|eager|gpu-sim] [--seq-block N] [--seq-items N]
//            [--seq-layout auto|blocked|striped]
//
//===----------------------------------------------------------------------===//

#include "cac/DSL/AST.h"
#include "cac/Driver/Driver.h"
#include "cac/Eval/Batch.h"
#include "cac/Eval/Runner.h"
#include "cac/Pipelines.h"
#include "cac/Target/Target.h"
#ifdef CAC_EAGER_PLUGIN
#include "cac/Eager/EagerPlugin.h"
#include <cstdlib>
#include <dlfcn.h>
#endif

#include "cac/DSL/Sema.h"
#include "cac/Dialect/Cac/IR/CacDialect.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

using namespace mlir;
namespace cl = llvm::cl;

static cl::OptionCategory cat("cac options");
static cl::opt<std::string> command(cl::Positional, cl::Required,
                                    cl::desc("<compile|eval>"), cl::cat(cat));
static cl::opt<std::string> inputFile(cl::Positional, cl::Required,
                                      cl::desc("<file.cac>"), cl::cat(cat));
static cl::opt<std::string> outputFile("o", cl::desc("Output file"),
                                       cl::value_desc("file"), cl::init("-"),
                                       cl::cat(cat));
static cl::opt<std::string> arch("arch", cl::desc("GPU architecture"),
                                 cl::init("sm_90"), cl::cat(cat));
static cl::opt<std::string> bundleDir(
    "bundle", cl::desc("Also write a kernel bundle (manifest, PTX, host.so)"),
    cl::value_desc("dir"), cl::cat(cat));
static cl::opt<bool> useF64("f64", cl::desc("Compute in double precision"),
                            cl::cat(cat));
enum class Emit { None, Ast, Mlir, Kernels, Llvm, Ptx, Manifest };
static cl::opt<Emit> emit(
    "emit", cl::desc("What to print instead of compiling to PTX"),
    cl::init(Emit::None),
    cl::values(clEnumValN(Emit::Ast, "ast", "the analysed syntax tree"),
               clEnumValN(Emit::Mlir, "mlir", "the cac dialect"),
               clEnumValN(Emit::Kernels, "kernels",
                          "the cac dialect partitioned into kernels"),
               clEnumValN(Emit::Llvm, "llvm", "LLVM IR of the CPU kernels"),
               clEnumValN(Emit::Ptx, "ptx", "PTX of the GPU kernels"),
               clEnumValN(Emit::Manifest, "manifest", "the bundle manifest")),
    cl::cat(cat));
static cl::opt<std::string> inputBatch("input", cl::desc("Batch (JSON)"),
                                       cl::value_desc("batch.json"),
                                       cl::cat(cat));
static cl::list<std::string> paramArgs("param",
                                       cl::desc("Set a parameter NAME=VALUE"),
                                       cl::value_desc("name=value"),
                                       cl::cat(cat));
static cl::opt<std::string> backend(
    "backend",
    cl::desc("eval backend: cpu, eager, or gpu-sim (the GPU kernels' block "
             "algorithms run by CPU threads, one per GPU thread)"),
    cl::init("cpu"), cl::cat(cat));
/// The lowering options' defaults, from their one declaration (the ODS
/// options of cac-lower-kernels).
static const cac::CacLowerKernelsOptions kLowerDefaults;
static cl::opt<int64_t> seqBlock(
    "seq-block",
    cl::desc("GPU: threads per block of the block-per-sequence kernels (a "
             "power of 2 up to 1024; 0: one thread per sequence)"),
    cl::init(kLowerDefaults.seqBlock), cl::cat(cat));
static cl::opt<int64_t> seqItems(
    "seq-items",
    cl::desc("GPU: tokens per thread in a tile of a "
             "block-per-sequence kernel (1 to 16)"),
    cl::init(kLowerDefaults.seqItems), cl::cat(cat));
static cl::opt<std::string> seqLayout(
    "seq-layout",
    cl::desc("GPU: which tokens of a tile a thread of a block-per-sequence "
             "kernel takes: blocked (--seq-items consecutive ones), striped "
             "(one per row of --seq-block tokens: contiguous warp accesses) "
             "or auto (default: striped in loops without a scan)"),
    cl::init(kLowerDefaults.seqLayout), cl::cat(cat));
static cl::opt<int64_t> seqMinBlocks(
    "seq-min-blocks",
    cl::desc("GPU: blocks of a block-per-sequence kernel that must fit on one "
             "SM at once (PTX .minnctapersm; ptxas bounds the registers to "
             "fit them); 0 (default): no bound"),
    cl::init(kLowerDefaults.seqMinBlocks), cl::cat(cat));
static cl::opt<bool> seqPrefetch(
    "seq-prefetch",
    cl::desc("GPU: each tile of a block-per-sequence kernel asks L2 for the "
             "next tile's tokens (PTX prefetch.L2; default on, "
             "--seq-prefetch=false turns it off)"),
    cl::init(kLowerDefaults.seqPrefetch), cl::cat(cat));
static cl::opt<bool> seqPrefetchWritten(
    "seq-prefetch-written",
    cl::desc("GPU, with --seq-prefetch: also prefetch the buffers the kernel "
             "itself wrote in an earlier loop (scans, ranks; default on); "
             "=false: only the ones it did not write"),
    cl::init(kLowerDefaults.seqPrefetchWritten), cl::cat(cat));
static cl::opt<bool> fuseGroups(
    "fuse-groups",
    cl::desc("compute a group kernel that reads only inputs (GRPO's and "
             "RLOO's group statistics) inside the seq kernels that read it: "
             "one kernel fewer (every target; default on, =false keeps the "
             "group kernel)"),
    cl::init(true), cl::cat(cat));
static cl::opt<std::string> dtype(
    "dtype", cl::desc("eval precision: f64 (default) or f32"),
    cl::init("f64"), cl::cat(cat));
static cl::opt<std::string> gradMode(
    "grad",
    cl::desc("objectives: the gradient from the compiled gradient operations "
             "(compiled, default) or from LibTorch autograd of the eager "
             "forward pass (autograd; --backend eager only)"),
    cl::init("compiled"), cl::cat(cat));
static cl::opt<std::string> aggregationArg(
    "aggregation",
    cl::desc("objectives: token-mean, seq-mean-token-mean, "
             "seq-mean-token-sum or seq-mean-token-sum-norm (overrides the "
             "file's)"),
    cl::cat(cat));
static cl::opt<bool> verifyDiagnostics(
    "verify-diagnostics",
    cl::desc("Check expected-error comments in the source (for tests)"),
    cl::cat(cat));

namespace {

int fail(const llvm::Twine &msg) {
  llvm::WithColor::error(llvm::errs(), "cac") << msg << "\n";
  return 1;
}

bool writeOutput(llvm::StringRef text) {
  std::string err;
  auto out = openOutputFile(outputFile, &err);
  if (!out) {
    fail(err);
    return false;
  }
  out->os() << text;
  out->keep();
  return true;
}

LogicalResult runPipeline(MLIRContext &ctx, ModuleOp module,
                          llvm::function_ref<void(OpPassManager &)> build) {
  PassManager pm(&ctx);
  build(pm);
  return pm.run(module);
}

#ifdef CAC_EAGER_PLUGIN
/// Loads the eager backend from lib/ beside this executable's bin/ (or the
/// file CAC_EAGER_PLUGIN names in the environment).
llvm::Expected<cac::RunEagerFn> loadEagerPlugin() {
  std::string path;
  if (const char *env = std::getenv("CAC_EAGER_PLUGIN")) {
    path = env;
  } else {
    static int anchor;
    std::string exe = llvm::sys::fs::getMainExecutable("cac", &anchor);
    llvm::SmallString<256> p(llvm::sys::path::parent_path(
        llvm::sys::path::parent_path(exe)));
    llvm::sys::path::append(p, "lib", CAC_EAGER_PLUGIN);
    path = std::string(p);
  }
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return llvm::createStringError(
        "cannot load the eager backend (LibTorch) from " + path + ": " +
        dlerror());
  auto entry = reinterpret_cast<cac::RunEagerFn (*)()>(
      dlsym(handle, cac::kEagerPluginEntry));
  if (!entry)
    return llvm::createStringError(path + " has no " +
                                   cac::kEagerPluginEntry);
  return entry();
}
#endif

/// The lowering options from the command line (every pipeline takes the
/// ones it honours).
static cac::KernelOptions loweringOptions() {
  cac::KernelOptions opts;
  opts.chip = arch;
  opts.lower.seqBlock = seqBlock;
  opts.lower.seqItems = seqItems;
  opts.lower.seqLayout = seqLayout;
  opts.lower.seqMinBlocks = seqMinBlocks;
  opts.lower.seqPrefetch = seqPrefetch;
  opts.lower.seqPrefetchWritten = seqPrefetchWritten;
  opts.fuseGroups = fuseGroups;
  return opts;
}

int realMain() {
  if (std::string err = cac::lowerKernelsOptionsError(loweringOptions().lower);
      !err.empty())
    return fail("--" + err);
  DialectRegistry registry;
  cac::registerAllDialects(registry);
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  ctx.allowUnregisteredDialects(false);

  std::string err;
  auto file = openInputFile(inputFile, &err);
  if (!file)
    return fail(err);
  llvm::SourceMgr sourceMgr;
  unsigned bufferId = sourceMgr.AddNewSourceBuffer(std::move(file), SMLoc());

  if (verifyDiagnostics) {
    SourceMgrDiagnosticVerifierHandler handler(sourceMgr, &ctx);
    auto module = cac::compileToCac(sourceMgr, bufferId, ctx, useF64);
    if (module) {
      PassManager pm(&ctx);
      cac::buildCacOptimizationPipeline(pm);
      (void)pm.run(*module);
    }
    return failed(handler.verify()) ? 1 : 0;
  }
  SourceMgrDiagnosticHandler handler(sourceMgr, &ctx);

  if (command == "compile") {
    if (emit == Emit::Ast) {
      auto est = cac::parseAndAnalyze(sourceMgr, bufferId, ctx);
      if (!est)
        return 1;
      std::string s;
      llvm::raw_string_ostream os(s);
      cac::ast::dump(*est, os);
      return writeOutput(os.str()) ? 0 : 1;
    }
    auto module = cac::compileToCac(sourceMgr, bufferId, ctx, useF64);
    if (!module)
      return 1;
    auto print = [&](ModuleOp m) {
      std::string s;
      llvm::raw_string_ostream os(s);
      OpPrintingFlags flags;
      m.print(os, flags);
      return writeOutput(os.str()) ? 0 : 1;
    };
    if (emit == Emit::Mlir)
      return print(*module);
    if (emit == Emit::Kernels) {
      if (failed(runPipeline(ctx, *module, cac::buildCacOptimizationPipeline)))
        return 1;
      return print(*module);
    }
    const cac::KernelOptions opts = loweringOptions();
    auto cpuPipeline = [&](OpPassManager &pm) {
      cac::buildCpuPipeline(pm, opts);
    };
    if (emit == Emit::Llvm) {
      if (failed(runPipeline(ctx, *module, cpuPipeline)))
        return 1;
      auto ir = cac::emitLlvmIr(*module);
      return succeeded(ir) && writeOutput(*ir) ? 0 : 1;
    }
    // PTX (the default) and manifests come from the CUDA pipeline.
    OwningOpRef<ModuleOp> cpuModule;
    if (!bundleDir.empty())
      cpuModule = module->clone();
    if (failed(runPipeline(ctx, *module, [&](OpPassManager &pm) {
          cac::buildCudaPipeline(pm, opts);
        })))
      return 1;
    auto ptx = cac::extractPtx(*module);
    auto manifest = cac::extractManifest(*module);
    if (failed(ptx) || failed(manifest))
      return 1;
    if (!bundleDir.empty()) {
      if (failed(runPipeline(ctx, *cpuModule, cpuPipeline)))
        return 1;
      if (failed(cac::writeBundle(bundleDir, *manifest, *ptx, *cpuModule)))
        return 1;
    }
    if (emit == Emit::Manifest)
      return writeOutput(*manifest) ? 0 : 1;
    if (bundleDir.empty() || outputFile != "-" || emit == Emit::Ptx)
      return writeOutput(*ptx) ? 0 : 1;
    return 0;
  }

  if (command == "eval") {
    if (inputBatch.empty())
      return fail("eval needs --input batch.json");
    if (dtype != "f64" && dtype != "f32")
      return fail("--dtype must be f64 or f32");
    auto module = cac::compileToCac(sourceMgr, bufferId, ctx, dtype == "f64");
    if (!module)
      return 1;
    auto batchFile = llvm::MemoryBuffer::getFileOrSTDIN(inputBatch);
    if (!batchFile)
      return fail("cannot read " + inputBatch + ": " +
                  batchFile.getError().message());
    auto batch = cac::parseBatchJson((*batchFile)->getBuffer(), inputBatch);
    if (!batch)
      return fail(llvm::toString(batch.takeError()));
    for (const std::string &p : paramArgs) {
      auto [name, value] = llvm::StringRef(p).split('=');
      double v;
      if (name.empty() || value.trim().getAsDouble(v))
        return fail("--param expects NAME=NUMBER, got '" + p + "'");
      batch->params[name.str()] = v;
    }
    // Observation tokens: the estimator runs on the actions only, and its
    // token outputs are put back with 0 on the observations.
    cac::Batch fullBatch;
    if (!batch->obs.empty()) {
      fullBatch = std::move(*batch);
      *batch = cac::actionsOnly(fullBatch);
    }
    // An objective: its aggregation mode (a parameter, with the file's mode
    // as its default) and, for "seq-mean-token-sum-norm" without norm_len,
    // the longest sequence of the batch as the normaliser's length.
    std::optional<cac::ObjectiveInfo> objective;
    int aggregation = 0;
    module->walk([&](cac::ir::EstimatorOp est) {
      if (auto obj = est->getAttrOfType<DictionaryAttr>("cac.objective"))
        objective = cac::ObjectiveInfo{
            cast<StringAttr>(obj.get("wrt")).str(),
            cast<StringAttr>(obj.get("loss_domain")).str()};
    });
    if (!aggregationArg.empty()) {
      int code = cac::aggregationCode(aggregationArg);
      if (!objective || objective->lossDomain != "token" || code < 0)
        return fail(!objective ? "--aggregation applies to objectives"
                    : objective->lossDomain != "token"
                        ? "--aggregation applies to token losses (a seq "
                          "loss is averaged over the sequences)"
                        : "--aggregation must be token-mean, "
                          "seq-mean-token-mean, seq-mean-token-sum or "
                          "seq-mean-token-sum-norm");
      batch->params["aggregation"] = code;
    }
    if (objective && objective->lossDomain == "token") {
      module->walk([&](cac::ir::ParamOp p) {
        if (p.getName() == "aggregation")
          if (auto d = p.getDefaultValue())
            aggregation = int(d->convertToDouble());
      });
      if (auto it = batch->params.find("aggregation");
          it != batch->params.end())
        aggregation = int(it->second);
      if (aggregation < 0 || aggregation > 3 ||
          (batch->params.count("aggregation") &&
           batch->params["aggregation"] != aggregation))
        return fail("the parameter 'aggregation' must be 0 (token-mean), 1 "
                    "(seq-mean-token-mean), 2 (seq-mean-token-sum) or 3 "
                    "(seq-mean-token-sum-norm)");
      if (aggregation == 3 && !batch->params.count("norm_len")) {
        int64_t longest = 0;
        for (int64_t b = 0; b < batch->numSeqs; ++b)
          longest = std::max<int64_t>(
              longest, batch->seqOffsets[b + 1] - batch->seqOffsets[b]);
        batch->params["norm_len"] = double(longest);
      }
    }
    if (gradMode != "compiled" && gradMode != "autograd")
      return fail("--grad must be compiled or autograd");
    if (gradMode == "autograd" && (!objective || backend != "eager"))
      return fail("--grad autograd needs an objective and --backend eager");
    std::vector<cac::OutputArray> outputs;
    if (backend == "eager") {
#ifdef CAC_EAGER_PLUGIN
      auto runEager = loadEagerPlugin();
      if (!runEager)
        return fail(llvm::toString(runEager.takeError()));
      auto r = (*runEager)(*module, *batch, gradMode == "autograd");
      if (!r)
        return fail(llvm::toString(r.takeError()));
      outputs = std::move(*r);
#else
      return fail("this build of cac has no eager backend (LibTorch)");
#endif
    } else if (backend == "cpu" || backend == "gpu-sim") {
      bool sim = backend == "gpu-sim";
      const cac::KernelOptions opts = loweringOptions();
      if (failed(runPipeline(ctx, *module, [&](OpPassManager &pm) {
            if (sim)
              cac::buildCudaSimPipeline(pm, opts);
            else
              cac::buildCpuPipeline(pm, opts);
          })))
        return 1;
      auto manifestText = cac::extractManifest(*module);
      if (failed(manifestText))
        return 1;
      auto manifest = cac::parseManifest(*manifestText);
      if (!manifest)
        return fail(llvm::toString(manifest.takeError()));
      auto jit = cac::JitKernels::create(*module, cac::simulationSymbols());
      if (failed(jit))
        return 1;
      auto r = cac::runCpuKernels(
          *manifest, [&](llvm::StringRef n) { return (*jit)->lookup(n); },
          *batch);
      if (!r)
        return fail(llvm::toString(r.takeError()));
      outputs = std::move(*r);
    } else {
      return fail("--backend must be cpu, eager or gpu-sim");
    }
    if (auto e = cac::checkSegmentCounts(*batch, outputs))
      return fail(llvm::toString(std::move(e)));
    std::string summary;
    if (objective) {
      auto s = cac::finishObjective(*objective, aggregation, *batch, outputs);
      if (!s)
        return fail(llvm::toString(s.takeError()));
      summary = *s;
    }
    if (!fullBatch.obs.empty()) {
      cac::expandToFull(fullBatch, outputs);
      *batch = std::move(fullBatch);
    }
    return writeOutput(cac::formatOutputsJson(*batch, outputs, summary)) ? 0
                                                                         : 1;
  }
  return fail("unknown command '" + command + "'; expected compile or eval");
}

int mainThunk(void *) { return realMain(); }

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM y(argc, argv);
  cl::HideUnrelatedOptions(cat);
  cl::ParseCommandLineOptions(argc, argv,
                              "cac: compile and run credit-assignment "
                              "estimators\n");
  return cac::runWithLargeStack(mainThunk, nullptr);
}
