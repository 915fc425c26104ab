//===- BlockPrimitives.cpp - Block-wide scans and reductions --------------===//
//
// What a block's threads compute together: warp shuffles inside each warp,
// the warps' partials through shared memory, barriers between them. The
// shuffles and barriers are the target's (BlockThreads).
//
//===----------------------------------------------------------------------===//

#include "SeqKernel.h"

namespace cac::lowering {

Value SeqKernelEmitter::isThread0() {
  return b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::eq, threads->tid,
                                 e.i64(0));
}
Value SeqKernelEmitter::loadShared(Value i) {
  return b.create<LLVM::LoadOp>(e.loc, e.ft, sharedAt(i));
}
void SeqKernelEmitter::storeShared(Value v, Value i) {
  b.create<LLVM::StoreOp>(e.loc, v, sharedAt(i));
}

/// The block-wide scan of each thread's affine step (a, b): y -> a*y + b.
/// Returns the composition of the steps of the threads before this one
/// (the identity for thread 0) and of all the block's steps. A warp scans
/// its lanes' steps with shuffles (Kogge-Stone, log2(32) rounds, no
/// barrier); each warp's last lane puts the warp's composition in shared
/// memory; after one barrier every thread composes the warps before its
/// own (at most 32 broadcast reads). Shared memory is free again after the
/// caller's next barrier.
std::tuple<Value, Value, Value, Value> SeqKernelEmitter::blockScan(Value a,
                                                                   Value bv) {
  const int64_t size = threads->size, w = threads->warp(), warps = size / w;
  Value tid = threads->tid;
  Value lane = b.create<arith::RemSIOp>(e.loc, tid, e.i64(w));
  Value warp = b.create<arith::DivSIOp>(e.loc, tid, e.i64(w));
  for (int64_t d = 1; d < w; d *= 2) {
    Value a0 = threads->shuffle(a, d, false);
    Value b0 = threads->shuffle(bv, d, false);
    Value has = b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::sge, lane,
                                        e.i64(d));
    auto [na, nb] = affineAfter(a0, b0, a, bv);
    a = b.create<arith::SelectOp>(e.loc, has, na, a);
    bv = b.create<arith::SelectOp>(e.loc, has, nb, bv);
  }
  // The lanes before this one: the inclusive value of lane - 1.
  Value pa = threads->shuffle(a, 1, false);
  Value pb = threads->shuffle(bv, 1, false);
  Value notFirst =
      b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::sgt, lane, e.i64(0));
  Value exA = b.create<arith::SelectOp>(e.loc, notFirst, pa, e.fconst(1.0));
  Value exB = b.create<arith::SelectOp>(e.loc, notFirst, pb, e.fconst(0.0));
  Value last = b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::eq, lane,
                                       e.i64(w - 1));
  IndexOps(e).when(last, [&] {
    storeShared(a, warp);
    storeShared(bv, b.create<arith::AddIOp>(e.loc, warp, e.i64(size)));
  });
  threads->barrier();
  // The warps before this one, and all warps.
  Value wa = e.fconst(1.0), wb = e.fconst(0.0);
  Value ta = wa, tb = wb;
  for (int64_t k = 0; k < warps; ++k) {
    Value ka = loadShared(e.i64(k)), kb = loadShared(e.i64(size + k));
    auto [na, nb] = affineAfter(ta, tb, ka, kb);
    ta = na;
    tb = nb;
    if (k + 1 == warps)
      break;
    // After warp k, the prefix of warps k + 1 and later includes it.
    Value before = b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::sgt,
                                           warp, e.i64(k));
    wa = b.create<arith::SelectOp>(e.loc, before, ta, wa);
    wb = b.create<arith::SelectOp>(e.loc, before, tb, wb);
  }
  auto [xa, xb] = affineAfter(wa, wb, exA, exB);
  return {xa, xb, ta, tb};
}

/// Combines the threads' partials of a reduction: a butterfly of shuffles in
/// each warp (every lane ends with the same value), the warps' values
/// through shared memory, combined by every thread in the same order; every
/// thread gets the result.
Value blockReduce(Emitter &e, const BlockThreads &threads, ReduceKind kind,
                  Value acc) {
  OpBuilder &b = e.b;
  const int64_t size = threads.size, w = threads.warp(), warps = size / w;
  auto combine = [&](Value x, Value y) -> Value {
    switch (kind) {
    case ReduceKind::Min:
      return b.create<arith::MinimumFOp>(e.loc, x, y);
    case ReduceKind::Max:
      return b.create<arith::MaximumFOp>(e.loc, x, y);
    default: // sum, mean, count
      return b.create<arith::AddFOp>(e.loc, x, y);
    }
  };
  for (int64_t d = w / 2; d >= 1; d /= 2)
    acc = combine(acc, threads.shuffle(acc, d, true));
  if (warps == 1)
    return acc;
  auto sharedAt = [&](Value i) { return e.ptrAt(threads.shared, i, e.ft); };
  Value tid = threads.tid;
  Value lane = b.create<arith::RemSIOp>(e.loc, tid, e.i64(w));
  Value warp = b.create<arith::DivSIOp>(e.loc, tid, e.i64(w));
  Value first =
      b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::eq, lane, e.i64(0));
  IndexOps(e).when(
      first, [&] { b.create<LLVM::StoreOp>(e.loc, acc, sharedAt(warp)); });
  threads.barrier();
  auto loadShared = [&](int64_t k) {
    return b.create<LLVM::LoadOp>(e.loc, e.ft, sharedAt(e.i64(k)));
  };
  Value r = loadShared(0);
  for (int64_t k = 1; k < warps; ++k)
    r = combine(r, loadShared(k));
  threads.barrier();
  return r;
}

Value SeqKernelEmitter::blockReduce(ReduceKind kind, Value acc) {
  return lowering::blockReduce(e, *threads, kind, acc);
}

/// For each thread's counts c[k] of the 16 digits, its first output slot
/// of each digit: the keys of smaller digits in all threads, plus those of
/// digit k in the threads before it. One warp scan per digit (shuffles),
/// the warps' totals through shared memory ([k * warps + warp]), one
/// barrier.
SmallVector<Value> SeqKernelEmitter::blockDigitSlots(ArrayRef<Value> counts) {
  Location loc = e.loc;
  const int64_t size = threads->size, w = threads->warp(), warps = size / w,
                digits = counts.size();
  Value tid = threads->tid;
  Value lane = b.create<arith::RemSIOp>(loc, tid, e.i64(w));
  Value warp = b.create<arith::DivSIOp>(loc, tid, e.i64(w));
  SmallVector<Value> incl(counts.begin(), counts.end());
  for (int64_t d = 1; d < w; d *= 2) {
    Value has =
        b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, lane, e.i64(d));
    for (int64_t k = 0; k < digits; ++k) {
      Value prev = threads->shuffle(incl[k], d, false);
      incl[k] = b.create<arith::SelectOp>(
          loc, has, b.create<arith::AddFOp>(loc, incl[k], prev), incl[k]);
    }
  }
  Value last = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, lane,
                                       e.i64(w - 1));
  IndexOps(e).when(last, [&] {
    for (int64_t k = 0; k < digits; ++k)
      storeShared(incl[k],
                  b.create<arith::AddIOp>(loc, warp, e.i64(k * warps)));
  });
  threads->barrier();
  SmallVector<Value> slots;
  Value base = e.fconst(0.0);
  for (int64_t k = 0; k < digits; ++k) {
    // The same digit in this warp's lanes before this one, and in the
    // warps before this one; then all of the digit.
    Value mine = b.create<arith::SubFOp>(loc, incl[k], counts[k]);
    Value total = e.fconst(0.0);
    for (int64_t v = 0; v < warps; ++v) {
      Value t = loadShared(e.i64(k * warps + v));
      Value earlier = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sgt,
                                              warp, e.i64(v));
      mine = b.create<arith::SelectOp>(
          loc, earlier, b.create<arith::AddFOp>(loc, mine, t), mine);
      total = b.create<arith::AddFOp>(loc, total, t);
    }
    slots.push_back(b.create<arith::AddFOp>(loc, base, mine));
    base = b.create<arith::AddFOp>(loc, base, total);
  }
  return slots;
}

} // namespace cac::lowering
