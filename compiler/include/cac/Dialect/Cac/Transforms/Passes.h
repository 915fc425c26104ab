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

/// The unit attribute that cac-fuse-groups puts on a group kernel that the
/// seq kernels reading it compute themselves.
inline constexpr llvm::StringLiteral kFusedAttrName = "cac.fused";

/// Whether group kernel `kernel` may be fused into the seq kernels that read
/// it: it reads no other kernel's results, writes no output and only seq
/// kernels read its results.
bool isFusableGroupKernel(KernelOp kernel);
} // namespace cac::ir

#endif // CAC_DIALECT_CAC_TRANSFORMS_PASSES_H
