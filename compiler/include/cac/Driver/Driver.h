//===- Driver.h - From a .cac file to the cac dialect -----------*- C++ -*-===//

#ifndef CAC_DRIVER_DRIVER_H
#define CAC_DRIVER_DRIVER_H

#include "cac/DSL/AST.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/SourceMgr.h"

#include <memory>

namespace cac {

/// Registers every dialect and translation the cac pipelines use.
void registerAllDialects(mlir::DialectRegistry &registry);

/// Parses and analyses buffer `bufferId`; null after reporting errors.
std::unique_ptr<ast::Estimator> parseAndAnalyze(llvm::SourceMgr &sourceMgr,
                                                unsigned bufferId,
                                                mlir::MLIRContext &context);

/// Parses, analyses and emits the cac dialect (verified); null on error.
mlir::OwningOpRef<mlir::ModuleOp> compileToCac(llvm::SourceMgr &sourceMgr,
                                               unsigned bufferId,
                                               mlir::MLIRContext &context,
                                               bool f64);

/// Runs `fn` on a thread with a large stack (the front end recurses over
/// expression trees); returns its result.
int runWithLargeStack(int (*fn)(void *), void *arg);

} // namespace cac

#endif // CAC_DRIVER_DRIVER_H
