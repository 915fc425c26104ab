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

std::unique_ptr<cac::ast::Estimator>
cac::parseAndAnalyze(llvm::SourceMgr &sourceMgr, unsigned bufferId,
                     MLIRContext &context) {
  auto est = parseEstimator(sourceMgr, bufferId, context);
  if (!est || failed(analyze(*est, context)))
    return nullptr;
  return est;
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
