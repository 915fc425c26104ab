//===- CommandLine.cpp - cac's options and their checks -------------------===//
//
// The `cl` options of cac live here, with the function that parses them
// without exiting (CommandLine.h).
//
//===----------------------------------------------------------------------===//

#include "CommandLine.h"

#include "cac/Conversion/Passes.h"
#include "cac/Target/Target.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"

#include <cmath>

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
static cl::opt<std::string> hostCpu(
    "cpu",
    cl::desc("The CPU that --emit=llvm and a bundle's host.so are compiled "
             "for: native (this machine's, the default) or an LLVM CPU name "
             "(x86-64-v3, znver3, ...), for a bundle that runs on every CPU "
             "with that CPU's features"),
    cl::init("native"), cl::cat(cat));
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
static cl::opt<int64_t> seqSplit(
    "seq-split",
    cl::desc("GPU: blocks to aim for per launch of a seq kernel of token maps "
             "and scans: B sequences are split over min(ceil(N / B), 64) "
             "blocks each (docs/pipeline.md); 0 (default): one block per "
             "sequence"),
    cl::init(kLowerDefaults.seqSplit), cl::cat(cat));
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

const char *const kOverview =
    "cac: compile and run credit-assignment estimators\n";

namespace {

/// The command line's values.
ToolOptions toolOptions() {
  ToolOptions o;
  o.inputFile = inputFile;
  o.outputFile = outputFile;
  o.bundleDir = bundleDir;
  o.useF64 = useF64;
  o.emit = emit;
  o.inputBatches = inputBatches;
  o.backend = backend;
  o.dtype = dtype;
  o.gradMode = gradMode;
  o.aggregation = aggregationArg;
  o.cpu = hostCpu;
  KernelOptions &k = o.kernels;
  k.chip = arch;
  k.lower.seqBlock = seqBlock;
  k.lower.seqItems = seqItems;
  k.lower.seqLayout = seqLayout;
  k.lower.seqMinBlocks = seqMinBlocks;
  k.lower.seqSplit = seqSplit;
  k.lower.seqPrefetch = seqPrefetch;
  k.lower.seqPrefetchWritten = seqPrefetchWritten;
  k.fuseGroups = fuseGroups;
  return o;
}

/// --param NAME=VALUE, as the batch's "params": a name and a finite number
/// (nan, inf and overflowing numbers are refused).
llvm::Error parseParams(std::vector<std::pair<std::string, double>> &out) {
  for (const std::string &p : paramArgs) {
    auto [name, value] = llvm::StringRef(p).split('=');
    double v;
    if (name.empty() || value.trim().getAsDouble(v))
      return llvm::createStringError("--param expects NAME=NUMBER, got '" + p +
                                     "'");
    if (!std::isfinite(v))
      return llvm::createStringError("--param " + name.str() +
                                     " must be a finite number, got '" +
                                     value.trim().str() + "'");
    out.emplace_back(name.str(), v);
  }
  return llvm::Error::success();
}

/// A response file `@PATH` that is a device, a FIFO or a directory, which
/// LLVM's expansion would read forever or block on; empty if none. (Nested
/// response files are LLVM's to read.)
std::string unreadableResponseFile(llvm::ArrayRef<const char *> args) {
  for (size_t i = 1; i < args.size(); ++i) {
    llvm::StringRef a(args[i]);
    if (!a.consume_front("@") || a.empty())
      continue;
    if (llvm::sys::fs::exists(a) && !llvm::sys::fs::is_regular_file(a))
      return "cannot read the response file '" + a.str() +
             "': not a regular file";
  }
  return "";
}

/// The options the parse set, checked.
llvm::Expected<CommandLine> checkedCommandLine() {
  CommandLine c;
  c.command = command;
  c.options = toolOptions();
  c.timeLimit = timeLimit;
  c.verifyDiagnostics = verifyDiagnostics;
  if (std::string err = lowerKernelsOptionsError(c.options.kernels.lower);
      !err.empty())
    return llvm::createStringError("--" + err);
  if (std::string err = nvptxChipError(c.options.kernels.chip); !err.empty())
    return llvm::createStringError(err);
  if (std::string err; !isKnownHostCpu(c.options.cpu, err))
    return llvm::createStringError("--cpu: " + err);
  if (c.command != "compile" && c.command != "eval")
    return llvm::createStringError("unknown command '" + c.command +
                                   "'; expected compile or eval");
  // Only eval reads --param.
  if (c.command == "eval")
    if (llvm::Error e = parseParams(c.options.params))
      return std::move(e);
  return c;
}

} // namespace

llvm::Expected<CommandLine> parseCommandLine(llvm::ArrayRef<const char *> args,
                                             llvm::raw_ostream &errs) {
  static const bool hidden = (cl::HideUnrelatedOptions(cat), true);
  (void)hidden;
  if (std::string err = unreadableResponseFile(args); !err.empty())
    return llvm::createStringError(err);
  cl::ResetAllOptionOccurrences();
  if (!cl::ParseCommandLineOptions(static_cast<int>(args.size()), args.data(),
                                   kOverview, &errs))
    return llvm::createStringError("");
  return checkedCommandLine();
}

} // namespace cac::tool
