//===- Sema.h - Names, types and domains of a .cac estimator ----*- C++ -*-===//

#ifndef CAC_DSL_SEMA_H
#define CAC_DSL_SEMA_H

#include "cac/DSL/AST.h"
#include "cac/DSL/Builtins.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/LogicalResult.h"

#include <optional>

namespace cac {

/// The aggregation modes of an objective's token loss (docs/language.md),
/// in the order of their codes (the `aggregation` parameter).
extern const char *const kAggregationModes[4];

/// The code of an aggregation mode, or -1.
int aggregationCode(llvm::StringRef mode);

/// Resolves names, checks types and domains and annotates the AST in place.
/// Reports every error through the context's diagnostic engine.
mlir::LogicalResult analyze(ast::Estimator &est, mlir::MLIRContext &context);

} // namespace cac

#endif // CAC_DSL_SEMA_H
