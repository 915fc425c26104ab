//===- Autodiff.h - Reverse-mode gradients of cac fields --------*- C++ -*-===//
//
// An objective's gradient is derived on the cac dialect, before partitioning,
// so that it is fused into kernels like any other value (docs/language.md,
// Objectives; docs/pipeline.md).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_FRONTEND_AUTODIFF_H
#define CAC_FRONTEND_AUTODIFF_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"

namespace cac {

/// Emits, at the builder's insertion point (the end of the estimator body,
/// after `loss` is defined), the operations that compute
///
///     d/d wrt ( sum over the elements i of seed[i] * loss[i] )
///
/// where `loss` and `seed` are fields of one domain and `wrt` is a
/// `cac.input` of the token or seq domain. `seed` is not differentiated.
/// Returns the gradient, a field of `wrt`'s type. Returns null after emitting
/// an error at the operation that cannot be differentiated (a tree
/// operation, a min/max/var reduction, a divisor of `mod`, ...) or at `loc`
/// when the loss does not depend on `wrt`.
mlir::Value differentiate(mlir::OpBuilder &builder, mlir::Location loc,
                          mlir::Value loss, mlir::Value seed, mlir::Value wrt);

} // namespace cac

#endif // CAC_FRONTEND_AUTODIFF_H
