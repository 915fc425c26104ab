//===- Target.h - PTX, native code and kernel bundles -----------*- C++ -*-===//

#ifndef CAC_TARGET_TARGET_H
#define CAC_TARGET_TARGET_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/StringRef.h"

#include <functional>
#include <memory>
#include <string>

namespace mlir {
class ExecutionEngine;
}

namespace cac {

/// The PTX text of the `gpu.binary` that the CUDA pipeline leaves in `module`
/// (trailing NUL stripped).
mlir::FailureOr<std::string> extractPtx(mlir::ModuleOp module);

/// The manifest JSON that `cac-lower-kernels` attached to `module`.
mlir::FailureOr<std::string> extractManifest(mlir::ModuleOp module);

/// Translates an LLVM-dialect module to LLVM IR text (optimized at -O3).
mlir::FailureOr<std::string> emitLlvmIr(mlir::ModuleOp module);

/// Writes a shared object with the kernels of an LLVM-dialect module: emits
/// an object file and links it with the system C compiler.
mlir::LogicalResult emitSharedObject(mlir::ModuleOp module,
                                     llvm::StringRef soPath);

/// CPU kernels compiled in-process with MLIR's ExecutionEngine.
class JitKernels {
public:
  ~JitKernels();
  /// Compiles an LLVM-dialect module at -O3. `symbols` are the host
  /// functions the module may call (the simulation's barrier).
  static mlir::FailureOr<std::unique_ptr<JitKernels>>
  create(mlir::ModuleOp module,
         llvm::ArrayRef<std::pair<llvm::StringRef, void *>> symbols = {});
  /// The entry of kernel `name` (`void name(void**)`, or the simulation's
  /// block entry), or null.
  void *lookup(llvm::StringRef name);

private:
  std::unique_ptr<mlir::ExecutionEngine> engine;
};

/// Writes DIR/manifest.json and, when given, DIR/kernels.ptx and DIR/host.so.
mlir::LogicalResult writeBundle(llvm::StringRef dir, llvm::StringRef manifest,
                                llvm::StringRef ptx, mlir::ModuleOp cpuModule);

} // namespace cac

#endif // CAC_TARGET_TARGET_H
