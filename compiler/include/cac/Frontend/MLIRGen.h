//===- MLIRGen.h - From the AST to the cac dialect ---------------*- C++ -*-===//

#ifndef CAC_FRONTEND_MLIRGEN_H
#define CAC_FRONTEND_MLIRGEN_H

#include "cac/DSL/AST.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace cac {

/// Emits a module holding one `cac.estimator` for an analysed AST. Numbers
/// get `floatType` (f32 or f64). Every operation carries the FileLineColLoc of
/// the source it comes from.
mlir::OwningOpRef<mlir::ModuleOp> mlirGen(mlir::MLIRContext &context,
                                          const ast::Estimator &est,
                                          mlir::FloatType floatType);

} // namespace cac

#endif // CAC_FRONTEND_MLIRGEN_H
