//===- Eager.h - The eager (LibTorch) backend -------------------*- C++ -*-===//
//
// The eager backend runs an estimator by walking its `cac.estimator` body in
// order and evaluating every operation with LibTorch tensor operations on a
// padded layout (docs/eager.md). It is the oracle the compiled backends are
// tested against and the baseline they are benchmarked against.
//
// This header includes no LibTorch, so that tools compiled without
// exceptions (cac) can call it; cac/Eager/Padded.h has the tensor-level API.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_EAGER_EAGER_H
#define CAC_EAGER_EAGER_H

#include "cac/Eval/Batch.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <vector>

namespace cac {

/// Runs the one `cac.estimator` of `module` (as MLIRGen emits it, before
/// cac-partition; `cac.kernel` regions are accepted too) on `batch`, in the
/// element type of the estimator's fields (f32 or f64). Returns the outputs in
/// the order of the `cac.output` operations: token outputs packed ([N], row
/// major by sequence), seq outputs [B], group outputs [G] (dense group order).
///
/// Fails, never crashes, on an operation it does not support (naming the
/// operation and its location), on a batch input that is missing, and on a
/// parameter without a value (cac::resolveParams).
///
/// With `autograd`, the module must be an objective: its gradient output
/// `grad_<wrt>` is then computed by LibTorch autograd of the eager forward
/// pass (the derivative of the sum of the `loss` output) instead of by the
/// compiler's gradient operations, the reference they are tested against.
llvm::Expected<std::vector<OutputArray>>
runEager(mlir::ModuleOp module, const Batch &batch, bool autograd = false);

} // namespace cac

#endif // CAC_EAGER_EAGER_H
