//===- Passes.h - Transformations of the cac dialect ------------*- C++ -*-===//

#ifndef CAC_DIALECT_CAC_TRANSFORMS_PASSES_H
#define CAC_DIALECT_CAC_TRANSFORMS_PASSES_H

#include "cac/Dialect/Cac/IR/CacDialect.h"
#include "mlir/Pass/Pass.h"

namespace cac::ir {
#define GEN_PASS_DECL
#include "cac/Dialect/Cac/Transforms/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "cac/Dialect/Cac/Transforms/Passes.h.inc"
} // namespace cac::ir

#endif // CAC_DIALECT_CAC_TRANSFORMS_PASSES_H
