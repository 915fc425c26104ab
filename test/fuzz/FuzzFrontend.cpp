//===- FuzzFrontend.cpp - libFuzzer target over the cac front end ---------===//
//
// cac-fuzz-frontend: feeds arbitrary bytes through what `cac compile` does
// with a file:
//
//   parse -> Sema -> MLIRGen -> verify     (cac::compileToCac, --emit=mlir)
//   print the cac dialect                 (--emit=mlir)
//   print the analysed AST                (--emit=ast)
//   canonicalize, CSE, cac-partition, CPU lowering, manifest
//                                         (--emit=llvm, `cac eval`)
//   translation to LLVM IR and LLVM's -O3 (CAC_FUZZ_STAGE=llvm only)
//
// Errors are fine: the front end must report them as diagnostics, which are
// rendered (file:line:col with the source line, as `cac` prints them) into a
// string and dropped. A crash, a sanitizer report, an LLVM fatal error or a
// hang is a bug. Inputs run on a thread with the same large stack as `cac`
// (cac::runWithLargeStack).
//
// CAC_FUZZ_STAGE (environment) says how far to go: `mlir` stops after the
// verified cac dialect, `cpu` (the default) after the CPU pipeline and the
// manifest, `llvm` also translates to LLVM IR and optimizes it, which is
// LLVM's code, uninstrumented here, and ten times slower than the rest.
//
//===----------------------------------------------------------------------===//

#include "cac/DSL/AST.h"
#include "cac/Driver/Driver.h"
#include "cac/Pipelines.h"
#include "cac/Target/Target.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <pthread.h>
#include <string>

using namespace mlir;

namespace {

enum class Stage { Mlir, Cpu, Llvm };
Stage stage = Stage::Cpu;

/// One context serves many inputs (creating one and loading the dialects
/// costs more than most inputs); it is replaced every so often so that the
/// names and constants it uniques do not pile up. Nothing else carries over,
/// and a crash reproduces from its input alone with a fresh context.
constexpr unsigned kInputsPerContext = 1000;
std::unique_ptr<MLIRContext> context;
unsigned contextUses = 0;

MLIRContext &getContext() {
  if (!context || contextUses++ == kInputsPerContext) {
    context.reset();
    DialectRegistry registry;
    cac::registerAllDialects(registry);
    context = std::make_unique<MLIRContext>(registry,
                                            MLIRContext::Threading::DISABLED);
    context->loadAllAvailableDialects();
    context->allowUnregisteredDialects(false);
    contextUses = 1;
  }
  return *context;
}

/// What `cac compile FILE --emit=...` does, without writing anything.
void runOne(const uint8_t *data, size_t size) {
  MLIRContext &ctx = getContext();
  llvm::SourceMgr sourceMgr;
  unsigned bufferId = sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(reinterpret_cast<const char *>(data), size),
          "fuzz.cac"),
      llvm::SMLoc());
  // Render every diagnostic as `cac` would (with the source line and a
  // caret, which reads the buffer at the reported line and column), then
  // drop it.
  std::string diagnostics;
  llvm::raw_string_ostream diagOs(diagnostics);
  SourceMgrDiagnosticHandler handler(sourceMgr, &ctx, diagOs);

  OwningOpRef<ModuleOp> module =
      cac::compileToCac(sourceMgr, bufferId, ctx, /*f64=*/true);
  if (!module)
    return;

  // --emit=mlir and --emit=ast.
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os, OpPrintingFlags());
  if (auto est = cac::parseAndAnalyze(sourceMgr, bufferId, ctx))
    cac::ast::dump(*est, os);
  if (stage == Stage::Mlir)
    return;

  // --emit=llvm and the first half of `cac eval --backend cpu`.
  PassManager pm(&ctx);
  cac::buildCpuPipeline(pm);
  if (failed(pm.run(*module)))
    return;
  if (failed(cac::extractManifest(*module)) || stage == Stage::Cpu)
    return;
  (void)cac::emitLlvmIr(*module);
}

/// Inputs run on one worker thread with the stack `cac` gives the front end
/// (cac::runWithLargeStack: 512 MiB), started once: a thread per input would
/// cost more than the input.
struct Worker {
  std::mutex mutex;
  std::condition_variable cv;
  const uint8_t *data = nullptr;
  size_t size = 0;
  bool pending = false;
};
// Never destroyed: the worker still waits on it when the process exits.
Worker &worker = *new Worker;

void *workerMain(void *) {
  for (;;) {
    std::unique_lock<std::mutex> lock(worker.mutex);
    worker.cv.wait(lock, [] { return worker.pending; });
    lock.unlock();
    runOne(worker.data, worker.size);
    lock.lock();
    worker.pending = false;
    worker.cv.notify_all();
  }
  return nullptr;
}

void startWorker() {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, size_t(512) << 20);
  pthread_t thread;
  if (pthread_create(&thread, &attr, workerMain, nullptr) != 0) {
    llvm::errs() << "cac-fuzz-frontend: cannot start the worker thread\n";
    std::exit(2);
  }
  pthread_detach(thread);
  pthread_attr_destroy(&attr);
}

} // namespace

/// LLVM's BumpPtrAllocator poisons its slabs in code built with ASan (ours,
/// through the inline header) and unpoisons what it hands out; MLIR's copy in
/// libMLIR is built without ASan and does not, so memory from a slab that our
/// code started and libMLIR allocated from would read as poisoned. Manual
/// poisoning is off; everything else ASan checks stays on.
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0";
}

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  if (const char *s = std::getenv("CAC_FUZZ_STAGE")) {
    if (!std::strcmp(s, "mlir"))
      stage = Stage::Mlir;
    else if (!std::strcmp(s, "cpu"))
      stage = Stage::Cpu;
    else if (!std::strcmp(s, "llvm"))
      stage = Stage::Llvm;
    else {
      llvm::errs()
          << "cac-fuzz-frontend: CAC_FUZZ_STAGE must be mlir, cpu or llvm\n";
      std::exit(2);
    }
  }
  startWorker();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::unique_lock<std::mutex> lock(worker.mutex);
  worker.data = data;
  worker.size = size;
  worker.pending = true;
  worker.cv.notify_all();
  worker.cv.wait(lock, [] { return !worker.pending; });
  return 0;
}
