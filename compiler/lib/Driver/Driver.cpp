//===- Driver.cpp - From a .cac file to the cac dialect -------------------===//

#include "cac/Driver/Driver.h"
#include "cac/DSL/Parser.h"
#include "cac/DSL/Sema.h"
#include "cac/Dialect/Cac/IR/CacDialect.h"
#include "cac/Frontend/MLIRGen.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Verifier.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <pthread.h>

using namespace mlir;

void cac::registerAllDialects(DialectRegistry &registry) {
  registry.insert<ir::CacDialect, arith::ArithDialect, cf::ControlFlowDialect,
                  func::FuncDialect, gpu::GPUDialect, LLVM::LLVMDialect,
                  NVVM::NVVMDialect, math::MathDialect, scf::SCFDialect>();
  registerAllExtensions(registry);
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  registerBuiltinDialectTranslation(registry);
  registerGPUDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerNVVMDialectTranslation(registry);
}

namespace {

/// The files imported so far, by real path: each is read, parsed and
/// analyzed once however many aliases and importers name it (null: it
/// failed, and its errors have been reported).
using ImportCache =
    llvm::StringMap<std::shared_ptr<cac::ast::Estimator>>;

/// Parses buffer `bufferId`, resolves its imports (paths relative to the
/// importing file, each file parsed and analyzed on its own and added to
/// `sourceMgr` so that its diagnostics show its lines), then analyzes it.
/// `active` holds the files being imported, to report cycles.
std::unique_ptr<cac::ast::Estimator>
parseWithImports(llvm::SourceMgr &sourceMgr, unsigned bufferId,
                 MLIRContext &context, std::vector<std::string> &active,
                 ImportCache &cache) {
  auto est = cac::parseEstimator(sourceMgr, bufferId, context);
  if (!est)
    return nullptr;
  std::string self =
      sourceMgr.getMemoryBuffer(bufferId)->getBufferIdentifier().str();
  llvm::StringRef dir = llvm::sys::path::parent_path(self);
  bool ok = true;
  for (cac::ast::Import &imp : est->imports) {
    Location at = cac::toLocation(context, imp.loc);
    llvm::SmallString<256> path(imp.path);
    if (!llvm::sys::path::is_absolute(path) && !dir.empty()) {
      path = dir;
      llvm::sys::path::append(path, imp.path);
    }
    llvm::SmallString<256> real;
    std::string key = llvm::sys::fs::real_path(path, real)
                          ? path.str().str()
                          : real.str().str();
    if (llvm::is_contained(active, key)) {
      emitError(at) << "import cycle: '" << imp.path
                    << "' is already being imported";
      ok = false;
      continue;
    }
    if (auto hit = cache.find(key); hit != cache.end()) {
      if (!hit->second) {
        emitError(at) << "in the estimator imported as '" << imp.alias << "'";
        ok = false;
      }
      imp.module = hit->second;
      continue;
    }
    if (active.size() >= 16) {
      emitError(at) << "imports nest more than 16 deep";
      ok = false;
      continue;
    }
    // .cac files only, regular and no larger than the parser accepts: an
    // import of /dev/zero, a FIFO or a huge file must be an error, not a
    // hang, and one of another kind of file must not echo its lines.
    uint64_t size = 0;
    if (llvm::sys::path::extension(path) != ".cac" ||
        (llvm::sys::fs::exists(path) &&
         (!llvm::sys::fs::is_regular_file(path) ||
          llvm::sys::fs::file_size(path, size) ||
          size > cac::ParseLimits().maxFileBytes))) {
      emitError(at) << "cannot import '" << path
                    << "': not a regular .cac file of at most "
                    << (cac::ParseLimits().maxFileBytes >> 20) << " MiB";
      ok = false;
      continue;
    }
    auto file = llvm::MemoryBuffer::getFile(path);
    if (!file) {
      emitError(at) << "cannot read '" << path << "': "
                    << file.getError().message();
      ok = false;
      continue;
    }
    unsigned id = sourceMgr.AddNewSourceBuffer(std::move(*file), llvm::SMLoc());
    active.push_back(key);
    std::shared_ptr<cac::ast::Estimator> sub =
        parseWithImports(sourceMgr, id, context, active, cache);
    active.pop_back();
    cache[key] = sub;
    if (!sub) {
      emitError(at) << "in the estimator imported as '" << imp.alias << "'";
      ok = false;
      continue;
    }
    imp.module = std::move(sub);
  }
  if (!ok || failed(cac::analyze(*est, context)))
    return nullptr;
  return est;
}

} // namespace

std::unique_ptr<cac::ast::Estimator>
cac::parseAndAnalyze(llvm::SourceMgr &sourceMgr, unsigned bufferId,
                     MLIRContext &context) {
  std::vector<std::string> active;
  ImportCache cache;
  llvm::SmallString<256> real;
  std::string self =
      sourceMgr.getMemoryBuffer(bufferId)->getBufferIdentifier().str();
  active.push_back(llvm::sys::fs::real_path(self, real) ? self
                                                        : real.str().str());
  return parseWithImports(sourceMgr, bufferId, context, active, cache);
}

OwningOpRef<ModuleOp> cac::compileToCac(llvm::SourceMgr &sourceMgr,
                                        unsigned bufferId,
                                        MLIRContext &context, bool f64) {
  auto est = parseAndAnalyze(sourceMgr, bufferId, context);
  if (!est)
    return nullptr;
  FloatType ft = f64 ? FloatType(Float64Type::get(&context))
                     : FloatType(Float32Type::get(&context));
  OwningOpRef<ModuleOp> module = mlirGen(context, *est, ft);
  if (!module || failed(verify(*module)))
    return nullptr;
  return module;
}

namespace {
struct ThreadArgs {
  int (*fn)(void *);
  void *arg;
  int result;
};
void *threadMain(void *p) {
  auto *a = static_cast<ThreadArgs *>(p);
  a->result = a->fn(a->arg);
  return nullptr;
}
} // namespace

int cac::runWithLargeStack(int (*fn)(void *), void *arg) {
  ThreadArgs a{fn, arg, 1};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, size_t(512) << 20);
  pthread_t thread;
  if (pthread_create(&thread, &attr, threadMain, &a) != 0)
    return fn(arg);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  return a.result;
}
