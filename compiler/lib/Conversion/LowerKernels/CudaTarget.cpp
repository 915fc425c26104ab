//===- CudaTarget.cpp - The CUDA target -----------------------------------===//
//
// `gpu.func` kernels in the gpu.module `cac_kernels`: seq kernels one block
// of `seq-block` threads per sequence (with `seq-block` > 0), the others one
// thread per unit. Barriers are bar.sync, shuffles shfl.sync, the L2
// prefetch PTX's prefetch.L2. Compares stay float compares and sums keep
// their order: integer compares made GAE's kernel slower on the GPU, though
// its SASS had fewer instructions (docs/benchmarks.md), and the GPU's sums
// are block reductions.
//
//===----------------------------------------------------------------------===//

#include "KernelTarget.h"
#include "cac/Conversion/BlockKernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace cac::lowering {
namespace {

constexpr const char *kSharedName = "cac_shared";

class CudaTarget : public KernelTarget {
public:
  using KernelTarget::KernelTarget;

  bool blockPerSequence() const override { return o.seqBlock > 0; }
  bool integerCompares() const override { return false; }
  bool reassociableSums() const override { return false; }

  /// The gpu.module, and the block kernels' shared memory in it.
  void prepareModule(ModuleOp module, OpBuilder &b, Location loc) override {
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    b.getUnitAttr());
    gpuModule = b.create<gpu::GPUModuleOp>(loc, "cac_kernels");
    if (!blockPerSequence())
      return;
    OpBuilder gb = OpBuilder::atBlockBegin(gpuModule.getBody());
    auto arrTy = LLVM::LLVMArrayType::get(
        ft, uint64_t(cac::blockSharedElements(o.seqBlock)));
    gb.create<LLVM::GlobalOp>(loc, arrTy, /*isConstant=*/false,
                              LLVM::Linkage::Internal, kSharedName, Attribute(),
                              /*alignment=*/16,
                              /*addrSpace=*/3);
  }

  void createKernel(OpBuilder &, Location loc, StringRef name, const Abi &abi,
                    BodyFn body, bool perBlock) override;

  void barrier(const BlockThreads &t) const override {
    t.b.create<gpu::BarrierOp>(t.loc);
  }
  Value shuffle(const BlockThreads &t, Value v, int64_t delta,
                bool xorMode) const override {
    OpBuilder &tb = t.b;
    auto i32 = [&](int64_t x) -> Value {
      return tb.create<arith::ConstantOp>(t.loc, tb.getI32IntegerAttr(x));
    };
    auto sh = tb.create<gpu::ShuffleOp>(t.loc, v, i32(delta), i32(t.warp()),
                                        xorMode ? gpu::ShuffleMode::XOR
                                                : gpu::ShuffleMode::UP);
    return tb.create<arith::SelectOp>(t.loc, sh.getValid(),
                                      sh.getShuffleResult(), v);
  }
  void prefetchL2(OpBuilder &b, Location loc, Value addr) const override {
    b.create<LLVM::InlineAsmOp>(
        loc, TypeRange{}, ValueRange{addr}, "prefetch.L2 [$0];", "l",
        /*has_side_effects=*/true, /*is_align_stack=*/false,
        /*asm_dialect=*/nullptr, /*operand_attrs=*/nullptr);
  }

private:
  gpu::GPUModuleOp gpuModule;
};

} // namespace

/// A gpu.func kernel. With `perBlock`, one block of seq-block threads per
/// unit: unit = unit_begin + blockIdx.x; otherwise one thread per unit:
/// unit = unit_begin + blockIdx.x * blockDim.x + threadIdx.x. Units at or
/// past unit_end do nothing (a whole block at once with `perBlock`, so that
/// its barriers are reached by all its threads or none).
void CudaTarget::createKernel(OpBuilder &, Location loc, StringRef name,
                              const Abi &abi, BodyFn body, bool perBlock) {
  OpBuilder b = OpBuilder::atBlockEnd(gpuModule.getBody());
  b.setInsertionPoint(gpuModule.getBody()->getTerminator());
  SmallVector<Type> types;
  for (const AbiArg &a : abi.args)
    types.push_back(argType(b, a, ft));
  auto fn = b.create<gpu::GPUFuncOp>(loc, name, b.getFunctionType(types, {}));
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  Block &entry = fn.getBody().front();
  OpBuilder ib = OpBuilder::atBlockBegin(&entry);
  SmallVector<Value> args(entry.getArguments().begin(),
                          entry.getArguments().end());
  auto i64 = [&](Value index) -> Value {
    return ib.create<arith::IndexCastOp>(loc, ib.getI64Type(), index);
  };
  Value tid = i64(ib.create<gpu::ThreadIdOp>(loc, gpu::Dimension::x));
  Value bid = i64(ib.create<gpu::BlockIdOp>(loc, gpu::Dimension::x));
  Value lin = bid, shared;
  if (perBlock) {
    // The launch must use exactly seq-block threads (.reqntid in PTX).
    fn.setKnownBlockSizeAttr(
        ib.getDenseI32ArrayAttr({int32_t(o.seqBlock), 1, 1}));
    if (o.seqMinBlocks > 0)
      fn->setAttr("nvvm.minctasm",
                  ib.getI32IntegerAttr(int32_t(o.seqMinBlocks)));
    shared = ib.create<LLVM::AddressOfOp>(
        loc, LLVM::LLVMPointerType::get(ib.getContext(), 3), kSharedName);
  } else {
    Value bdim = i64(ib.create<gpu::BlockDimOp>(loc, gpu::Dimension::x));
    lin = ib.create<arith::AddIOp>(
        loc, ib.create<arith::MulIOp>(loc, bid, bdim), tid);
  }
  Value unit = ib.create<arith::AddIOp>(loc, args[kUnitBegin], lin);
  Value inRange = ib.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, unit,
                                           args[kUnitEnd]);
  auto ifOp = ib.create<scf::IfOp>(loc, inRange, /*withElse=*/false);
  {
    OpBuilder tb = ifOp.getThenBodyBuilder();
    BlockThreads threads = blockOf(tb, loc);
    threads.prefetch = o.seqPrefetch;
    threads.prefetchWritten = o.seqPrefetchWritten;
    threads.tid = tid;
    threads.shared = shared;
    body(tb, args, unit, perBlock ? &threads : nullptr);
  }
  ib.create<gpu::ReturnOp>(loc);
}

std::unique_ptr<KernelTarget> createCudaTarget(const LowerOptions &o, Type ft) {
  return std::make_unique<CudaTarget>(o, ft);
}

} // namespace cac::lowering
