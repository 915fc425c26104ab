//===- Schedule.cpp - The loops of a seq kernel ---------------------------===//

#include "Schedule.h"
#include "Emitter.h"

namespace cac::lowering {
namespace {

class Scheduler {
public:
  Scheduler(KernelOp kernel, const DenseMap<Value, unsigned> &storage,
            ArrayRef<Store> tokenStores)
      : kernel(kernel), storage(storage), tokenStores(tokenStores) {}

  std::vector<Loop> run();

private:
  bool inKernel(Value v) { return definedIn(kernel, v); }
  void collectTokenDeps(Value v, SmallVectorImpl<Dep> &deps);
  void tokenDeps(Value v, int64_t off, SmallVectorImpl<Dep> &deps);
  void outerDeps(Value v, SmallVectorImpl<Dep> &deps);
  void place(Item item, SmallVectorImpl<Dep> &deps,
             std::optional<bool> direction);
  bool fitsLast(SmallVectorImpl<Dep> &deps, std::optional<bool> &need);
  void placeStoresOf(Value r);

  KernelOp kernel;
  const DenseMap<Value, unsigned> &storage;
  ArrayRef<Store> tokenStores;
  std::vector<Loop> loops;
  DenseMap<Operation *, size_t> loopOf;
  DenseSet<Store> placedStores;
  /// The (value, offset) pairs and seq-level values the current
  /// collectTokenDeps walk has visited: a value read twice (`a + a`) is
  /// walked once, so the walk is linear in the kernel, not in its
  /// expansion as a tree.
  DenseSet<std::pair<Value, int64_t>> seenTok;
  DenseSet<Value> seenOuter;
};

} // namespace

/// The scans, ranks and reductions that token value `v` reads. A
/// dependence reached twice is listed once: `place` and `fitsLast` only ask
/// whether some dependence forces a loop, so repeats change nothing.
void Scheduler::collectTokenDeps(Value v, SmallVectorImpl<Dep> &deps) {
  seenTok.clear();
  seenOuter.clear();
  tokenDeps(v, 0, deps);
}

/// The scans, ranks and reductions that `v` reads at a token, at offset
/// `off` from it.
void Scheduler::tokenDeps(Value v, int64_t off, SmallVectorImpl<Dep> &deps) {
  if (!inKernel(v) || !seenTok.insert({v, off}).second)
    return;
  Operation *op = v.getDefiningOp();
  if (isa<ScanOp, RankOp>(op)) {
    deps.push_back({op, off, false});
    return;
  }
  if (auto s = dyn_cast<ShiftOp>(op)) {
    tokenDeps(s.getOperand(), off + int64_t(s.getOffset()), deps);
    tokenDeps(s.getFill(), off, deps);
    return;
  }
  if (auto bc = dyn_cast<BroadcastOp>(op)) {
    if (domainOf(bc.getOperand()) == Domain::Token)
      tokenDeps(bc.getOperand(), off, deps);
    else
      outerDeps(bc.getOperand(), deps);
    return;
  }
  if (auto g = dyn_cast<SegGatherOp>(op)) {
    tokenDeps(g.getIndex(), off, deps);
    return;
  }
  if (isElementwise(op))
    for (Value o : op->getOperands())
      tokenDeps(o, off, deps);
}

/// The reductions that seq-level value `v` reads.
void Scheduler::outerDeps(Value v, SmallVectorImpl<Dep> &deps) {
  if (!inKernel(v) || !seenOuter.insert(v).second)
    return;
  Operation *op = v.getDefiningOp();
  if (isa<ReduceOp>(op)) {
    deps.push_back({op, 0, true});
    return;
  }
  for (Value o : op->getOperands())
    outerDeps(o, deps);
}

/// Whether an item with `deps` may join the last loop; sets `need` to the
/// direction its reads at other tokens of that loop require.
bool Scheduler::fitsLast(SmallVectorImpl<Dep> &deps,
                         std::optional<bool> &need) {
  size_t last = loops.size() - 1;
  for (const Dep &d : deps) {
    if (loopOf.lookup(d.op) != last || d.offset == 0)
      continue;
    bool reverse = d.offset > 0;
    if (need && *need != reverse)
      return false;
    need = reverse;
  }
  return !(need && loops.back().directionFixed &&
           loops.back().reverse != *need);
}

/// Puts `item` in the last loop if its dependences allow, else in a new
/// one. A dependence read at another token of the same loop fixes that
/// loop's direction (t+1 needs a reverse loop, t-1 a forward one), so that
/// no later item can turn it around.
void Scheduler::place(Item item, SmallVectorImpl<Dep> &deps,
                      std::optional<bool> direction) {
  size_t minLoop = 0;
  for (const Dep &d : deps) {
    size_t l = loopOf.lookup(d.op);
    const Loop &dl = loops[l];
    bool sameOk = !d.seqLevel && (d.offset == 0 || !dl.directionFixed ||
                                  (d.offset > 0) == dl.reverse);
    minLoop = std::max(minLoop, sameOk ? l : l + 1);
  }
  bool useLast = !loops.empty() && loops.size() - 1 >= minLoop;
  std::optional<bool> need = direction;
  if (useLast)
    useLast = fitsLast(deps, need);
  if (!useLast) {
    loops.emplace_back();
    need = direction;
  }
  Loop &l = loops.back();
  if (need && !l.directionFixed) {
    l.reverse = *need;
    l.directionFixed = true;
  }
  if (item.op)
    loopOf[item.op] = loops.size() - 1;
  l.items.push_back(item);
}

std::vector<Loop> Scheduler::run() {
  for (Operation &op : kernel.getBody().front()) {
    SmallVector<Dep> deps;
    if (auto scan = dyn_cast<ScanOp>(op)) {
      collectTokenDeps(scan.getInput(), deps);
      collectTokenDeps(scan.getDecay(), deps);
      Item it{Item::Scan, &op, {}, storage.lookup(scan.getResult())};
      place(it, deps, scan.getReverse());
    } else if (auto rank = dyn_cast<RankOp>(op)) {
      // Every token's rank reads the whole sequence: what the input
      // depends on must be complete before the rank's loop starts.
      collectTokenDeps(rank.getInput(), deps);
      for (Dep &d : deps)
        d.seqLevel = true;
      Item it{Item::Rank, &op, {}, storage.lookup(rank.getResult())};
      place(it, deps, std::nullopt);
    } else if (auto red = dyn_cast<ReduceOp>(op)) {
      if (domainOf(red.getOperand()) != Domain::Token)
        continue;
      collectTokenDeps(red.getOperand(), deps);
      place(Item{Item::Reduce, &op, {}, 0}, deps, std::nullopt);
    }
    // Token stores are placed right after the op that defines their value
    // (or first, for values defined outside the kernel).
    for (Value r : op.getResults())
      placeStoresOf(r);
  }
  for (auto [v, buf] : tokenStores)
    if (!inKernel(v) && !placedStores.count({v, buf})) {
      SmallVector<Dep> deps;
      placedStores.insert({v, buf});
      place(Item{Item::Store, nullptr, v, buf}, deps, std::nullopt);
    }
  return std::move(loops);
}

void Scheduler::placeStoresOf(Value r) {
  for (auto [v, buf] : tokenStores) {
    if (v != r || placedStores.count({v, buf}))
      continue;
    // A scan or a rank writes its own storage.
    if (isa<ScanOp, RankOp>(r.getDefiningOp()) && storage.lookup(r) == buf) {
      placedStores.insert({v, buf});
      continue;
    }
    SmallVector<Dep> deps;
    collectTokenDeps(v, deps);
    placedStores.insert({v, buf});
    place(Item{Item::Store, nullptr, v, buf}, deps, std::nullopt);
  }
}

std::vector<Loop> scheduleLoops(KernelOp kernel,
                                const DenseMap<Value, unsigned> &storage,
                                ArrayRef<Store> tokenStores) {
  return Scheduler(kernel, storage, tokenStores).run();
}

} // namespace cac::lowering
