//===- cac.cpp - cac's main: the command line, then compile or eval -------===//
//
//   cac compile FILE -o OUT.ptx [--arch sm_90] [--bundle DIR] [--f64]
//   cac compile FILE --emit=ast|mlir|kernels|llvm|ptx [-o OUT]
//   cac eval FILE --input batch.json [--input b2.json]... [--param N=V]...
//            [--backend cpu|eager|gpu-sim] [--seq-block N] [--seq-items N]
//            [--seq-layout auto|blocked|striped]
//
//===----------------------------------------------------------------------===//

#include "CommandLine.h"
#include "Tool.h"

#include "cac/Dialect/Cac/IR/CacDialect.h"
#include "cac/Driver/Driver.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

#include <csignal>
#include <unistd.h>

using namespace mlir;

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

/// The parsed and checked command line main() runs.
cac::tool::CommandLine commandLine;

int realMain() {
  using cac::tool::fail;
  const cac::tool::ToolOptions &opts = commandLine.options;
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
  if (commandLine.verifyDiagnostics)
    return verifyDiagnosticsOf(src, opts.useF64);
  SourceMgrDiagnosticHandler handler(sourceMgr, &ctx);
  if (commandLine.command == "compile")
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
  auto parsed = cac::tool::parseCommandLine(
      llvm::ArrayRef<const char *>(argv, argc), llvm::errs());
  if (!parsed) {
    std::string msg = llvm::toString(parsed.takeError());
    return msg.empty() ? 1 : cac::tool::fail(msg);
  }
  commandLine = std::move(*parsed);
  if (commandLine.timeLimit > 0) {
    std::signal(SIGALRM, onTimeLimit);
    alarm(commandLine.timeLimit);
  }
  return cac::runWithLargeStack(mainThunk, nullptr);
}
