//===- Passes.td - Lowerings of the cac dialect --------------*- tablegen -*-===//

#ifndef CAC_CONVERSION_PASSES_TD
#define CAC_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def CacLowerKernels : Pass<"cac-lower-kernels", "::mlir::ModuleOp"> {
  let summary = "Lowers partitioned estimators to CPU functions or GPU kernels";
  let description = [{
    Turns every `cac.kernel` of a partitioned `cac.estimator` into a function
    over its grid units, written with scf loops, arith/math and LLVM pointer
    loads and stores on the packed batch (docs/bundle.md). Token values are
    evaluated on demand inside fused loops; scans and token -> seq
    reductions share loops where their dependences allow, so GAE is one
    reverse loop per sequence. With `target=cpu` each kernel is a `func.func
    @NAME(%params: !llvm.ptr)` that reads its arguments from a void** array
    and loops over `[unit_begin, unit_end)`; with `target=cuda` it is a
    `gpu.func` kernel in a `gpu.module` with one thread per unit. The module
    gets a `cac.manifest` attribute: the JSON manifest of the bundle.
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"",
           "cpu or cuda">,
    Option<"blockSize", "block-size", "int64_t", /*default=*/"128",
           "threads per block for CUDA kernels">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::gpu::GPUDialect", "::mlir::LLVM::LLVMDialect",
    "::mlir::math::MathDialect", "::mlir::scf::SCFDialect"
  ];
}

#endif // CAC_CONVERSION_PASSES_TD
