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

/// The CPU that LLVM IR and host.so are compiled for: "native" (this
/// machine's CPU with its features), or an LLVM CPU name of the host's
/// architecture ("x86-64-v3", "znver3", ...), for code that runs on every
/// CPU with that CPU's features.
inline constexpr llvm::StringLiteral kNativeCpu = "native";

/// Whether \p cpu names a CPU of this host's architecture ("native" does);
/// else \p error says why not.
bool isKnownHostCpu(llvm::StringRef cpu, std::string &error);

/// Translates an LLVM-dialect module to LLVM IR text, optimized at -O3 for
/// \p cpu.
mlir::FailureOr<std::string> emitLlvmIr(mlir::ModuleOp module,
                                        llvm::StringRef cpu = kNativeCpu);

/// Writes a shared object with the kernels of an LLVM-dialect module,
/// compiled for \p cpu: emits an object file and links it with the system C
/// compiler.
mlir::LogicalResult emitSharedObject(mlir::ModuleOp module,
                                     llvm::StringRef soPath,
                                     llvm::StringRef cpu = kNativeCpu);

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

/// Writes DIR/manifest.json and, when given, DIR/kernels.ptx and DIR/host.so
/// (compiled for \p cpu).
mlir::LogicalResult writeBundle(llvm::StringRef dir, llvm::StringRef manifest,
                                llvm::StringRef ptx, mlir::ModuleOp cpuModule,
                                llvm::StringRef cpu = kNativeCpu);

} // namespace cac

#endif // CAC_TARGET_TARGET_H
