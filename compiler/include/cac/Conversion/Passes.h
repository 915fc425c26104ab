//===- Passes.h - Lowerings of the cac dialect ------------------*- C++ -*-===//

#ifndef CAC_CONVERSION_PASSES_H
#define CAC_CONVERSION_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Pass/Pass.h"

namespace cac {
#define GEN_PASS_DECL
#include "cac/Conversion/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "cac/Conversion/Passes.h.inc"

/// Why `o` is not a valid set of cac-lower-kernels options (e.g. "seq-block
/// must be 0 or a power of 2 up to 1024, not 48"), or "" when it is: the one
/// check of them, for the pass and for `cac`'s command line.
std::string lowerKernelsOptionsError(const CacLowerKernelsOptions &o);
} // namespace cac

#endif // CAC_CONVERSION_PASSES_H
