//===- Tool.h - What the actions of the cac command share -------*- C++ -*-===//
//
// The command line (CommandLine.cpp) fills a ToolOptions; each action (Compile.cpp,
// Eval.cpp) reads it and the source it was given.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_TOOLS_CAC_TOOL_H
#define CAC_TOOLS_CAC_TOOL_H

#include "cac/Pipelines.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/SourceMgr.h"

#include <string>
#include <utility>
#include <vector>

namespace cac::tool {

/// What `cac compile --emit` prints instead of PTX.
enum class Emit { None, Ast, Mlir, Kernels, Llvm, Ptx, Manifest };

/// The command line's values.
struct ToolOptions {
  std::string inputFile;
  std::string outputFile = "-";
  std::string bundleDir;
  bool useF64 = false;
  Emit emit = Emit::None;
  std::vector<std::string> inputBatches; ///< --input, in order
  /// --param NAME=VALUE, checked (finite numbers; eval only).
  std::vector<std::pair<std::string, double>> params;
  std::string backend = "cpu";
  std::string dtype = "f64";
  std::string gradMode = "compiled";
  std::string aggregation;
  /// --cpu: what --emit=llvm and a bundle's host.so are compiled for.
  std::string cpu = "native";
  KernelOptions kernels;
};

/// The parsed source of one invocation.
struct Source {
  mlir::MLIRContext &ctx;
  llvm::SourceMgr &sourceMgr;
  unsigned bufferId;
};

/// Prints `cac: error: MSG` and returns 1.
int fail(const llvm::Twine &msg);

/// Writes \p text to the -o file (standard output by default).
bool writeOutput(const ToolOptions &opts, llvm::StringRef text);

/// Runs the pipeline \p build on \p module.
mlir::LogicalResult
runPipeline(mlir::MLIRContext &ctx, mlir::ModuleOp module,
            llvm::function_ref<void(mlir::OpPassManager &)> build);

/// `cac compile`: PTX, a bundle, or the stage --emit names (Compile.cpp).
int runCompile(const ToolOptions &opts, Source &src);

/// `cac eval`: batches through a backend compiled once, JSON out (Eval.cpp).
int runEval(const ToolOptions &opts, Source &src);

} // namespace cac::tool

#endif // CAC_TOOLS_CAC_TOOL_H
