//===- GpuSimTarget.cpp - The CUDA kernels simulated on the CPU -----------===//
//
// Target `cuda-sim` (`cac eval --backend gpu-sim`): the CUDA target's block
// kernels as CPU functions `NAME(void** params, i64 tid, ptr shared, ptr
// barrier)` that the block's simulated threads run (cac::simulateBlock),
// meeting at `cac_sim_barrier`; the kernels with one thread per unit are
// CPU functions. Compares and sums are the GPU's, so that what is tested is
// what the GPU runs.
//
//===----------------------------------------------------------------------===//

#include "KernelTarget.h"
#include "cac/Conversion/BlockKernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace cac::lowering {
namespace {

constexpr const char *kSimBarrier = cac::kSimBarrierSymbol;
constexpr const char *kSimWarpBarrier = cac::kSimWarpBarrierSymbol;

class GpuSimTarget : public KernelTarget {
public:
  using KernelTarget::KernelTarget;

  bool blockPerSequence() const override { return o.seqBlock > 0; }
  bool integerCompares() const override { return false; }
  bool reassociableSums() const override { return false; }

  /// Block kernels call the barrier functions: their declarations.
  void prepareModule(ModuleOp module, OpBuilder &, Location loc) override {
    if (!blockPerSequence())
      return;
    auto ptrTy = LLVM::LLVMPointerType::get(module.getContext());
    OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
    for (const char *name : {kSimBarrier, kSimWarpBarrier})
      b.create<LLVM::LLVMFuncOp>(
          loc, name,
          LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(b.getContext()),
                                      {ptrTy}));
  }

  void createKernel(OpBuilder &b, Location loc, StringRef name, const Abi &abi,
                    BodyFn body, bool perBlock) override {
    if (perBlock)
      createBlockFunction(b, loc, name, abi, body);
    else
      createCpuFunction(b, loc, name, abi, ft, body);
  }

  void barrier(const BlockThreads &t) const override {
    t.b.create<LLVM::CallOp>(t.loc, TypeRange{}, kSimBarrier,
                             ValueRange{t.barrierHandle});
  }
  Value shuffle(const BlockThreads &t, Value v, int64_t delta,
                bool xorMode) const override;

private:
  void createBlockFunction(OpBuilder &b, Location loc, StringRef name,
                           const Abi &abi, BodyFn body);
  /// Waits for the threads of the caller's warp only.
  void warpBarrier(const BlockThreads &t) const {
    t.b.create<LLVM::CallOp>(t.loc, TypeRange{}, kSimWarpBarrier,
                             ValueRange{t.barrierHandle});
  }
};

} // namespace

/// A shuffle through the exchange area of shared memory: each thread writes
/// its value, and after a barrier of its warp reads its source lane's
/// (another warp barrier before the area is written again). Only the warp
/// waits, as on the GPU, so a block barrier that the kernel needs is not
/// supplied by its shuffles.
Value GpuSimTarget::shuffle(const BlockThreads &t, Value v, int64_t delta,
                            bool xorMode) const {
  OpBuilder &lb = t.b;
  Location loc = t.loc;
  auto i64 = [&](int64_t x) -> Value {
    return lb.create<arith::ConstantOp>(loc, lb.getI64IntegerAttr(x));
  };
  Value tid = t.tid;
  Value area =
      lb.create<LLVM::GEPOp>(loc, t.shared.getType(), ft, t.shared,
                             ValueRange{i64(cac::blockExchangeOffset(t.size))});
  auto at = [&](Value i) {
    return lb.create<LLVM::GEPOp>(loc, area.getType(), ft, area, ValueRange{i});
  };
  lb.create<LLVM::StoreOp>(loc, v, at(tid));
  warpBarrier(t);
  Value lane = lb.create<arith::RemSIOp>(loc, tid, i64(t.warp()));
  Value src, valid;
  if (xorMode) {
    src = lb.create<arith::XOrIOp>(loc, tid, i64(delta));
    valid = lb.create<arith::ConstantOp>(loc, lb.getBoolAttr(true));
  } else {
    valid = lb.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, lane,
                                     i64(delta));
    src = lb.create<arith::SelectOp>(
        loc, valid, lb.create<arith::SubIOp>(loc, tid, i64(delta)), tid);
  }
  Value r = lb.create<LLVM::LoadOp>(loc, ft, at(src));
  warpBarrier(t);
  return lb.create<arith::SelectOp>(loc, valid, r, v);
}

/// A block kernel: `NAME(void** params, i64 tid, ptr shared, ptr barrier)`,
/// called by `seq-block` threads at once with the same unit range; each
/// unit ends with a barrier so that the next one may reuse shared memory.
void GpuSimTarget::createBlockFunction(OpBuilder &b, Location loc,
                                       StringRef name, const Abi &abi,
                                       BodyFn body) {
  auto ptrTy = LLVM::LLVMPointerType::get(b.getContext());
  auto fn = b.create<func::FuncOp>(
      loc, name, b.getFunctionType({ptrTy, b.getI64Type(), ptrTy, ptrTy}, {}));
  fn->setAttr("llvm.emit_c_interface", b.getUnitAttr());
  Block *entry = fn.addEntryBlock();
  OpBuilder ib = OpBuilder::atBlockBegin(entry);
  SmallVector<Value> args =
      loadCpuArgs(ib, loc, entry->getArgument(0), abi, ft);
  Value one = ib.create<arith::ConstantOp>(loc, ib.getI64IntegerAttr(1));
  auto loop = ib.create<scf::ForOp>(loc, args[kUnitBegin], args[kUnitEnd], one);
  {
    OpBuilder lb = OpBuilder::atBlockBegin(loop.getBody());
    lb.setInsertionPoint(loop.getBody()->getTerminator());
    BlockThreads threads = blockOf(lb, loc);
    threads.tid = entry->getArgument(1);
    threads.shared = entry->getArgument(2);
    threads.barrierHandle = entry->getArgument(3);
    body(lb, args, loop.getInductionVar(), &threads);
    threads.barrier();
  }
  ib.create<func::ReturnOp>(loc);
}

std::unique_ptr<KernelTarget> createGpuSimTarget(const LowerOptions &o,
                                                 Type ft) {
  return std::make_unique<GpuSimTarget>(o, ft);
}

} // namespace cac::lowering
