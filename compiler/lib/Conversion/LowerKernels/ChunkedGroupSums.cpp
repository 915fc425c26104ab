//===- ChunkedGroupSums.cpp - group_pos_sum over a chunk's positions ------===//
//
// group_pos_sum(x) at a token is the sum of x over the members of the
// sequence's group at the token's position. Evaluated at each token
// (GroupReads.cpp) it walks the members there: per token, per member, the
// member's offsets, a bound check and one load (OTB: three sums in groups of
// 8, some 190 instructions a token). In a chunked CPU loop (ChunkedScans.cpp)
// each sum is computed for the chunk's positions before its walks instead,
// member by member: an array of the chunk's sums, and per member one loop over
// the positions it reaches, adding its contiguous values (a loop LLVM
// vectorizes). The members are added in the same order, so the sums are
// the per-token walk's (but for the sign of a zero sum).
//
//===----------------------------------------------------------------------===//

#include "SeqKernel.h"

namespace cac::lowering {

/// The group_pos_sums that the items of `l` evaluate, in the kernel's order.
SmallVector<Operation *> SeqKernelEmitter::posSumsOf(const Loop &l) {
  DenseSet<Value> reached = reachedBy(l);
  SmallVector<Operation *> sums;
  for (auto s : kernel.getBody().front().getOps<GroupPosSumOp>())
    if (reached.count(s.getResult()))
      sums.push_back(s);
  return sums;
}

/// Each group_pos_sum of the chunk [chunkBase, chunkEnd) of `l`'s positions
/// into its array (at the position's offset in the chunk).
void SeqKernelEmitter::emitPosSumArrays(Loop &l, Value chunkEnd) {
  if (posSumArrays.empty())
    return;
  IndexOps ix(e);
  Value n = ix.sub(chunkEnd, chunkBase);
  Value lo = e.loadI32AsI64(kGroupOffsets, group);
  Value hi = e.loadI32AsI64(kGroupOffsets, ix.add(group, e.i64(1)));
  for (auto &entry : posSumArrays) {
    Value x = cast<GroupPosSumOp>(entry.first).getInput();
    Value array = entry.second;
    ix.each(e.i64(0), n, [&](Value i) { e.store(e.fconst(0.0), array, i); });
    ix.each(lo, hi, [&](Value k) {
      Value j = e.loadI32AsI64(kGroupMembers, k);
      Value sj = e.loadI32AsI64(kSeqOffsets, j);
      Value lenj = ix.sub(e.loadI32AsI64(kSeqOffsets, ix.add(j, e.i64(1))), sj);
      // The member reaches in-sequence position q < lenj; position p of the
      // loop is q = p forward, len - 1 - p in reverse.
      Value from = chunkBase, to = chunkEnd;
      if (l.reverse)
        from = b.create<arith::MaxSIOp>(e.loc, chunkBase, ix.sub(len, lenj));
      else
        to = b.create<arith::MinSIOp>(e.loc, chunkEnd, lenj);
      ix.each(from, to, [&](Value p) {
        Value q = l.reverse ? ix.sub(ix.sub(len, e.i64(1)), p) : p;
        Value at = ix.sub(p, chunkBase);
        Value sum = b.create<arith::AddFOp>(e.loc, e.load(array, at, e.ft),
                                            memberValue(x, j, ix.add(sj, q)));
        e.store(sum, array, at);
      });
    });
  }
}

} // namespace cac::lowering
