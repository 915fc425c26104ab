//===- KernelTarget.cpp - What the targets share --------------------------===//

#include "KernelTarget.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace cac::lowering {

void BlockThreads::barrier() const { target.barrier(*this); }

Value BlockThreads::shuffle(Value v, int64_t delta, bool xorMode) const {
  return target.shuffle(*this, v, delta, xorMode);
}

BlockThreads::Layout layoutOf(StringRef name) {
  return name == "blocked"   ? BlockThreads::Layout::Blocked
         : name == "striped" ? BlockThreads::Layout::Striped
                             : BlockThreads::Layout::Auto;
}

BlockThreads KernelTarget::blockOf(OpBuilder &b, Location loc) const {
  BlockThreads threads(*this, b, loc);
  threads.size = o.seqBlock;
  threads.items = o.seqItems;
  threads.layout = layoutOf(o.seqLayout);
  return threads;
}

std::unique_ptr<KernelTarget> createKernelTarget(const LowerOptions &o,
                                                 Type ft) {
  if (o.target == "cpu")
    return createCpuTarget(o, ft);
  if (o.target == "cuda")
    return createCudaTarget(o, ft);
  if (o.target == "cuda-sim")
    return createGpuSimTarget(o, ft);
  return nullptr;
}

Type argType(OpBuilder &b, const AbiArg &a, Type ft) {
  switch (a.kind) {
  case ArgKind::I64:
    return b.getI64Type();
  case ArgKind::Ptr:
    return LLVM::LLVMPointerType::get(b.getContext());
  case ArgKind::Scalar:
    return ft;
  }
  return {};
}

SmallVector<Value> loadCpuArgs(OpBuilder &ib, Location loc, Value argv,
                               const Abi &abi, Type ft) {
  auto ptrTy = LLVM::LLVMPointerType::get(ib.getContext());
  SmallVector<Value> args;
  for (auto [i, a] : llvm::enumerate(abi.args)) {
    Value idx = ib.create<arith::ConstantOp>(loc, ib.getI64IntegerAttr(i));
    Value slot =
        ib.create<LLVM::GEPOp>(loc, ptrTy, ptrTy, argv, ValueRange{idx});
    Value valuePtr = ib.create<LLVM::LoadOp>(loc, ptrTy, slot);
    args.push_back(ib.create<LLVM::LoadOp>(loc, argType(ib, a, ft), valuePtr));
  }
  return args;
}

void createCpuFunction(OpBuilder &b, Location loc, StringRef name,
                       const Abi &abi, Type ft, BodyFn body) {
  auto ptrTy = LLVM::LLVMPointerType::get(b.getContext());
  auto fn = b.create<func::FuncOp>(loc, name, b.getFunctionType({ptrTy}, {}));
  fn->setAttr("llvm.emit_c_interface", b.getUnitAttr());
  Block *entry = fn.addEntryBlock();
  OpBuilder ib = OpBuilder::atBlockBegin(entry);
  Value argv = entry->getArgument(0);
  SmallVector<Value> args = loadCpuArgs(ib, loc, argv, abi, ft);
  Value one = ib.create<arith::ConstantOp>(loc, ib.getI64IntegerAttr(1));
  auto loop = ib.create<scf::ForOp>(loc, args[kUnitBegin], args[kUnitEnd], one);
  {
    OpBuilder lb = OpBuilder::atBlockBegin(loop.getBody());
    lb.setInsertionPoint(loop.getBody()->getTerminator());
    body(lb, args, loop.getInductionVar(), nullptr);
  }
  ib.create<func::ReturnOp>(loc);
}

} // namespace cac::lowering
