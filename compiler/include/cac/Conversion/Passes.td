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
    `gpu.func` kernel in a `gpu.module`: `seq` kernels run one block of
    `seq-block` threads per sequence (tiles of `seq-block * seq-items`
    tokens, `seq-layout` blocked or striped within a tile, scans as block-wide parallel scans of their affine steps,
    reductions as block-wide trees; `seq-block=0` keeps one thread per
    sequence), `group` and `node` kernels one thread per unit. With
    `target=cuda-sim` the block kernels are CPU functions
    `@NAME(%params, %tid, %shared, %barrier)` that the block's simulated
    threads run, meeting at `cac_sim_barrier` (`cac eval --backend gpu-sim`,
    cac::simulateBlock), so the GPU's
    block algorithms are tested without a GPU. A group kernel marked
    `cac.fused` (cac-fuse-groups) is not emitted: the seq kernels that read
    it compute its values. The module gets a
    `cac.manifest` attribute: the JSON manifest of the bundle.
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"",
           "cpu, cuda or cuda-sim">,
    Option<"blockSize", "block-size", "int64_t", /*default=*/"128",
           "threads per block for CUDA kernels with one thread per unit">,
    Option<"seqBlock", "seq-block", "int64_t", /*default=*/"128",
           "threads per block of the block-per-sequence seq kernels (a "
           "power of 2 up to 1024; 0: one thread per sequence)">,
    Option<"seqItems", "seq-items", "int64_t", /*default=*/"4",
           "tokens per thread in a tile of a block-per-sequence kernel (1 "
           "to 16)">,
    Option<"seqPrefetch", "seq-prefetch", "bool", /*default=*/"true",
           "each tile of a block-per-sequence kernel asks L2 for the next "
           "tile's tokens (target cuda)">,
    Option<"seqPrefetchWritten", "seq-prefetch-written", "bool",
           /*default=*/"true",
           "with seq-prefetch: also the buffers the kernel itself wrote in "
           "an earlier loop (scans, ranks); false: only what it reads from "
           "memory it did not write">,
    Option<"seqMinBlocks", "seq-min-blocks", "int64_t", /*default=*/"0",
           "blocks of a block-per-sequence kernel that must fit on one SM "
           "at once (PTX .minnctapersm: ptxas limits the registers to fit "
           "them); 0: no limit">,
    Option<"seqSplit", "seq-split", "int64_t", /*default=*/"0",
           "blocks to aim for in a launch of a seq kernel made of token maps "
           "and independent scans of one direction: with B sequences each "
           "is split over min(ceil(seq-split / B), 64) blocks (a scan's "
           "carries come from a kernel NAME_carries launched before it); 0: "
           "one block per sequence">,
    Option<"seqLayout", "seq-layout", "std::string", /*default=*/"\"auto\"",
           "which tokens of a tile a thread takes: blocked (seq-items "
           "consecutive ones), striped (one in each row of seq-block "
           "tokens, so that a warp's loads and stores are contiguous) or "
           "auto (striped in loops without a scan, blocked in the others)">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::gpu::GPUDialect", "::mlir::LLVM::LLVMDialect",
    "::mlir::math::MathDialect", "::mlir::scf::SCFDialect"
  ];
}

def CacCpuMath : Pass<"cac-cpu-math", "::mlir::ModuleOp"> {
  let summary = "Expands f32 math.exp and math.log into arithmetic in the CPU's vector loops";
  let description = [{
    Replaces each f32 `math.exp` and `math.log` of a loop that LLVM
    vectorizes (an scf.for whose carried values are all reductions:
    reassociable sums, min, max, integer sums; or a vector operand) by its
    computation in arithmetic. Such a loop then holds no call: LLVM
    vectorizes it in the machine's widest vectors, with nothing spilled
    around a libmvec call (8 floats, every vector register clobbered), and
    without libmvec (a log) nothing is vectorized around a call per lane. A
    loop that carries a scan runs token after token, bound by the latency
    of its chains, and keeps libm's call, whose chain is shorter; so does a
    call outside loops, and every f64 one.

    exp(x): x = n ln2 + r with n = roundeven(x / ln2) and |r| <= ln2/2 (a
    two-part ln2, so that n ln2 is exact), exp(r) by its degree-7 Taylor
    polynomial in Estrin's order (truncation error below 1e-8 relative) and
    2^n as two exponents built in the float's bits (2^n1 2^n2 with n1 + n2 =
    n, so that results between the largest float and the smallest subnormal
    need no special case). Within 2 ulp of the exact value (NaN stays NaN,
    +inf and x > 88.73 give +inf, -inf and x < -103.98 give 0).

    log(x): x = m 2^e with m in [sqrt(1/2), sqrt(2)) read from the float's
    bits (a subnormal scaled by 2^23 first), log(m) = f - f^2/2 + f^3 p(f)
    with f = m - 1 and p a degree-8 minimax polynomial, plus e ln2 in two
    parts. Within 2 ulp of the exact value; log(0) = -inf, log(+inf) = +inf,
    and NaN for x < 0 and NaN.}];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::math::MathDialect",
  ];
}

#endif // CAC_CONVERSION_PASSES_TD
