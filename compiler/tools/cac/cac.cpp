//===- cac.cpp - The cac command line -------------------------------------===//
//
//   cac compile FILE -o OUT.ptx [--arch sm_90] [--bundle DIR] [--f64]
//   cac compile FILE --emit=ast|mlir|kernels|llvm|ptx [-o OUT]
//   cac eval FILE --input batch.json [--input b2.json]... [--param N=V]...
//            [--backend cpu|eager|gpu-sim] [--seq-block N] [--seq-items N]
//            [--seq-layout auto|blocked|striped]
//
//===----------------------------------------------------------------------===//

#include "Tool.h"

#include "cac/Dialect/Cac/IR/CacDialect.h"
#include "cac/Driver/Driver.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

#include <csignal>
#include <unistd.h>

using namespace mlir;
using cac::tool::Emit;
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
static cl::opt<unsigned> timeLimit(
    "time-limit",
    cl::desc("Stop with an error after this many seconds of wall time (0: no "
             "limit; cac-run sets one, so that no input hangs a run)"),
    cl::init(0), cl::cat(cat));
static cl::opt<std::string> bundleDir(
    "bundle", cl::desc("Also write a kernel bundle (manifest, PTX, host.so)"),
    cl::value_desc("dir"), cl::cat(cat));
static cl::opt<bool> useF64("f64", cl::desc("Compute in double precision"),
                            cl::cat(cat));
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
static cl::list<std::string>
    inputBatches("input",
                 cl::desc("Batch (JSON); several --input run one after another "
                          "on the kernels compiled once, and print a JSON "
                          "array of their outputs"),
                 cl::value_desc("batch.json"), cl::cat(cat));
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

namespace cac::tool {

int fail(const llvm::Twine &msg) {
  llvm::WithColor::error(llvm::errs(), "cac") << msg << "\n";
  return 1;
}

bool writeOutput(const ToolOptions &opts, llvm::StringRef text) {
  std::string err;
  auto out = openOutputFile(opts.outputFile, &err);
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

} // namespace cac::tool

namespace {

/// The command line's values.
cac::tool::ToolOptions toolOptions() {
  cac::tool::ToolOptions o;
  o.inputFile = inputFile;
  o.outputFile = outputFile;
  o.bundleDir = bundleDir;
  o.useF64 = useF64;
  o.emit = emit;
  o.inputBatches = inputBatches;
  o.params = paramArgs;
  o.backend = backend;
  o.dtype = dtype;
  o.gradMode = gradMode;
  o.aggregation = aggregationArg;
  cac::KernelOptions &k = o.kernels;
  k.chip = arch;
  k.lower.seqBlock = seqBlock;
  k.lower.seqItems = seqItems;
  k.lower.seqLayout = seqLayout;
  k.lower.seqMinBlocks = seqMinBlocks;
  k.lower.seqPrefetch = seqPrefetch;
  k.lower.seqPrefetchWritten = seqPrefetchWritten;
  k.fuseGroups = fuseGroups;
  return o;
}

/// Checks the `expected-error` comments of the source (for tests).
int verifyDiagnosticsOf(cac::tool::Source &src, bool useF64) {
  SourceMgrDiagnosticVerifierHandler handler(src.sourceMgr, &src.ctx);
  auto module = cac::compileToCac(src.sourceMgr, src.bufferId, src.ctx, useF64);
  if (module) {
    PassManager pm(&src.ctx);
    cac::buildCacOptimizationPipeline(pm);
    (void)pm.run(*module);
  }
  return failed(handler.verify()) ? 1 : 0;
}

int realMain() {
  using cac::tool::fail;
  const cac::tool::ToolOptions opts = toolOptions();
  if (std::string err = cac::lowerKernelsOptionsError(opts.kernels.lower);
      !err.empty())
    return fail("--" + err);
  if (std::string err = cac::nvptxChipError(opts.kernels.chip); !err.empty())
    return fail(err);
  if (command != "compile" && command != "eval")
    return fail("unknown command '" + command + "'; expected compile or eval");
  DialectRegistry registry;
  cac::registerAllDialects(registry);
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  ctx.allowUnregisteredDialects(false);

  // A device or a FIFO would be read until memory runs out, or forever; a
  // regular file's size is the parser's to check.
  if (opts.inputFile != "-" && llvm::sys::fs::exists(opts.inputFile) &&
      !llvm::sys::fs::is_regular_file(opts.inputFile))
    return fail("cannot compile '" + opts.inputFile +
                "': not a regular file");
  std::string err;
  auto file = openInputFile(opts.inputFile, &err);
  if (!file)
    return fail(err);
  llvm::SourceMgr sourceMgr;
  unsigned bufferId = sourceMgr.AddNewSourceBuffer(std::move(file), SMLoc());
  cac::tool::Source src{ctx, sourceMgr, bufferId};
  if (verifyDiagnostics)
    return verifyDiagnosticsOf(src, opts.useF64);
  SourceMgrDiagnosticHandler handler(sourceMgr, &ctx);
  if (command == "compile")
    return cac::tool::runCompile(opts, src);
  return cac::tool::runEval(opts, src);
}

int mainThunk(void *) { return realMain(); }

/// SIGALRM of --time-limit: a message and exit status 1 (only
/// async-signal-safe calls).
void onTimeLimit(int) {
  static const char msg[] =
      "cac: error: --time-limit: not finished within the time limit\n";
  ssize_t n = write(STDERR_FILENO, msg, sizeof(msg) - 1);
  (void)n;
  _exit(1);
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM y(argc, argv);
  cl::HideUnrelatedOptions(cat);
  cl::ParseCommandLineOptions(argc, argv,
                              "cac: compile and run credit-assignment "
                              "estimators\n");
  if (timeLimit > 0) {
    std::signal(SIGALRM, onTimeLimit);
    alarm(timeLimit);
  }
  return cac::runWithLargeStack(mainThunk, nullptr);
}
