//===- SerialCounters.cpp - Modulos of counting scans as counters ---------===//
//
// `nth(p, n)` starts a segment at every n-th token where p holds: the count
// of those tokens so far, minus one, modulo n is 0. The float modulo is a
// division, a floor, a multiply and a subtract at every token, on the path
// to each segment start, the longest chain of a loop that counts. In a
// loop walked by one thread the count goes up by 0 or 1 a token, so its
// modulo is a counter that steps with it and wraps at n: carried through
// the loop, one add, compare and select a token. Where the two are equal
// for every token (below) the loop takes the counter; otherwise it computes
// the modulo, in a second copy of the loop.
//
//===----------------------------------------------------------------------===//

#include "SeqKernel.h"

#include <cmath>
#include <optional>

namespace cac::lowering {

/// The literal value of `v` (or of its broadcast).
static std::optional<double> literalOf(Value v) {
  while (auto bc = v.getDefiningOp<BroadcastOp>())
    v = bc.getOperand();
  auto c = v.getDefiningOp<ConstantOp>();
  auto f = c ? dyn_cast<FloatAttr>(c.getValue()) : FloatAttr();
  if (!f)
    return std::nullopt;
  return f.getValueAsDouble();
}

double exactLimit(Type ft) { return std::ldexp(1.0, ft.isF32() ? 23 : 52); }

/// The modulos that the items of `l` evaluate and that a counter can give:
/// `mod(S - c, n)` or `mod(S, n)` where S is a forward or reverse scan of
/// `l` with decay 1 whose input is a boolean as a float (a step of 0 or 1),
/// c a literal integer and n token-invariant.
SmallVector<SeqKernelEmitter::ModCounter>
SeqKernelEmitter::modCounters(const Loop &l) {
  DenseSet<Operation *> scans;
  for (const Item &it : l.items)
    if (it.kind == Item::Scan)
      scans.insert(it.op);
  DenseSet<Value> reached = reachedBy(l);
  SmallVector<ModCounter> found;
  for (auto mod : kernel.getBody().front().getOps<BinaryOp>()) {
    if (mod.getKind() != BinaryKind::Mod || !reached.count(mod.getResult()) ||
        !isTokenInvariant(mod.getRhs()))
      continue;
    Value s = mod.getLhs();
    double c = 0.0;
    if (auto sub = s.getDefiningOp<BinaryOp>();
        sub && sub.getKind() == BinaryKind::Sub) {
      std::optional<double> lit = literalOf(sub.getRhs());
      if (!lit || *lit != std::floor(*lit) ||
          std::fabs(*lit) > exactLimit(e.ft))
        continue;
      s = sub.getLhs();
      c = *lit;
    }
    auto scan = s.getDefiningOp<ScanOp>();
    if (!scan || !scans.count(scan) || !isConstant(scan.getDecay(), 1.0))
      continue;
    auto step = scan.getInput().getDefiningOp<CastOp>();
    if (!step || !elemOf(step.getOperand()).isInteger(1))
      continue;
    Value n = mod.getRhs();
    if (auto bc = n.getDefiningOp<BroadcastOp>())
      n = bc.getOperand();
    found.push_back({mod.getResult(), scan, c, n});
  }
  return found;
}

/// Whether the counters give the float modulo's values at every token of
/// the sequence: n an integer in [1, L] and the sequence at most L tokens
/// long (L = exactLimit; c is checked when the counter is found). Then
/// every S - c is an integer below 2L in magnitude, whose quotient by n
/// rounds to no integer it is not, so `x - n * floor(x / n)` is the exact
/// floored remainder, the counter's value.
Value SeqKernelEmitter::countersApply(ArrayRef<ModCounter> cs) {
  Value limit = e.fconst(exactLimit(e.ft));
  Value ok =
      b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::sle, len,
                              e.i64(static_cast<int64_t>(exactLimit(e.ft))));
  for (const ModCounter &c : cs) {
    Value n = evalOuter(c.n);
    Value whole = b.create<arith::CmpFOp>(e.loc, arith::CmpFPredicate::OEQ, n,
                                          b.create<math::FloorOp>(e.loc, n));
    Value atLeast1 = b.create<arith::CmpFOp>(e.loc, arith::CmpFPredicate::OGE,
                                             n, e.fconst(1.0));
    Value small =
        b.create<arith::CmpFOp>(e.loc, arith::CmpFPredicate::OLE, n, limit);
    for (Value v : {whole, atLeast1, small})
      ok = b.create<arith::AndIOp>(e.loc, ok, v);
  }
  return ok;
}

/// The counter before the loop's first token, where S is 0: the modulo of
/// -c, computed as the modulo is, as an integer (exact where the counters
/// apply).
Value SeqKernelEmitter::counterInit(const ModCounter &c) {
  auto mod = cast<BinaryOp>(c.mod.getDefiningOp());
  Value r = e.elementwise(mod, {e.fconst(0.0 - c.c), evalOuter(c.n)});
  return b.create<arith::FPToSIOp>(e.loc, b.getI64Type(), r);
}

/// The counters of `scan` over the iteration's tokens `ts` (their values
/// before them in `prev`, one per counter of the loop): each adds the
/// scan's step and wraps at n, and is the modulo's value at its token. The
/// others are returned as they were. Integers: the carried chain is an
/// add, a compare and a select of one cycle each (in floats, about 9).
SmallVector<Value> SeqKernelEmitter::emitCounterSteps(Operation *scan,
                                                      ArrayRef<Value> ts,
                                                      ValueRange prev) {
  SmallVector<Value> out(prev.begin(), prev.end());
  auto step = cast<ScanOp>(scan).getInput().getDefiningOp<CastOp>();
  for (auto [k, c] : llvm::enumerate(counters)) {
    if (c.scan != scan)
      continue;
    Value n = b.create<arith::FPToSIOp>(e.loc, b.getI64Type(), evalOuter(c.n));
    Value r = out[k];
    for (Value t : ts) {
      Value inc = b.create<arith::ExtUIOp>(e.loc, b.getI64Type(),
                                           evalTok(step.getOperand(), t));
      Value up = b.create<arith::AddIOp>(e.loc, r, inc);
      Value wraps =
          b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::eq, up, n);
      r = b.create<arith::SelectOp>(e.loc, wraps, e.i64(0), up);
      tokenMemo[{c.mod, t}] = e.toFloat(r);
    }
    out[k] = r;
  }
  return out;
}

} // namespace cac::lowering
