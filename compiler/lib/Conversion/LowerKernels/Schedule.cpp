//===- Schedule.cpp - The loops of a seq kernel ---------------------------===//

#include "Schedule.h"
#include "Emitter.h"

#include "llvm/ADT/SetVector.h"

namespace cac::lowering {
namespace {

class Scheduler {
public:
  Scheduler(KernelOp kernel, const DenseMap<Value, unsigned> &storage,
            ArrayRef<Store> tokenStores, const Version &version)
      : kernel(kernel), storage(storage), tokenStores(tokenStores),
        version(version) {}

  std::vector<Loop> run();

private:
  bool inKernel(Value v) { return definedIn(kernel, v); }
  void collectTokenDeps(Value v, SmallVectorImpl<Dep> &deps);
  void tokenDeps(Value v, int64_t off, SmallVectorImpl<Dep> &deps);
  void outerDeps(Value v, SmallVectorImpl<Dep> &deps);
  void place(Item item, SmallVectorImpl<Dep> &deps,
             std::optional<bool> direction);
  bool fits(size_t at, SmallVectorImpl<Dep> &deps, std::optional<bool> &need);
  void placeStoresOf(Value r);
  void markUnstored();
  void markLive(Value v);

  KernelOp kernel;
  const DenseMap<Value, unsigned> &storage;
  ArrayRef<Store> tokenStores;
  const Version &version;
  /// In a version: the operations its outputs and results read; the
  /// scans, ranks and reductions of the other arms are left out.
  DenseSet<Operation *> live;
  std::vector<Loop> loops;
  DenseMap<Operation *, size_t> loopOf;
  /// The scans, ranks and reductions read at another token or in a later
  /// loop than their own.
  DenseSet<Operation *> readElsewhere;

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
/// dependence reached twice is listed once: `place` and `fits` only ask
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
  if (auto sel = dyn_cast<SelectOp>(op))
    if (Value arm = fixedArm(sel, version)) {
      tokenDeps(arm, off, deps);
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
  if (auto sel = dyn_cast<SelectOp>(op))
    if (Value arm = fixedArm(sel, version)) {
      outerDeps(arm, deps);
      return;
    }
  for (Value o : op->getOperands())
    outerDeps(o, deps);
}

/// Whether an item with `deps` may join loop `at`; sets `need` to the
/// direction its reads at other tokens of that loop require.
bool Scheduler::fits(size_t at, SmallVectorImpl<Dep> &deps,
                     std::optional<bool> &need) {
  for (const Dep &d : deps) {
    if (loopOf.lookup(d.op) != at || d.offset == 0)
      continue;
    bool reverse = d.offset > 0;
    if (need && *need != reverse)
      return false;
    need = reverse;
  }
  return !(need && loops[at].directionFixed && loops[at].reverse != *need);
}

/// Puts `item` in the first loop at or after its dependences' loops that
/// its direction allows (a token store: in the last loop if it fits
/// there), else in a new one. (Joining an earlier loop than
/// the last one changes nothing for the items placed since: they read the
/// new item only if they come after it in program order.) A dependence
/// read at another token of the same loop fixes that loop's direction (t+1
/// needs a reverse loop, t-1 a forward one), so that no later item can turn
/// it around.
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
  // A token store opens no loop wherever it goes: it joins the last loop
  // if it can, where the items that read the same values are (an earlier
  // loop would evaluate them twice).
  size_t at = minLoop;
  std::optional<bool> need = direction;
  if (item.kind == Item::Store && !loops.empty() &&
      loops.size() - 1 >= minLoop && fits(loops.size() - 1, deps, need))
    at = loops.size() - 1;
  for (; at < loops.size(); ++at) {
    need = direction;
    if (fits(at, deps, need))
      break;
  }
  if (at == loops.size()) {
    loops.emplace_back();
    need = direction;
  }
  Loop &l = loops[at];
  if (need && !l.directionFixed) {
    l.reverse = *need;
    l.directionFixed = true;
  }
  if (item.op)
    loopOf[item.op] = at;
  l.items.push_back(item);
  for (const Dep &d : deps)
    if (d.seqLevel || d.offset != 0 || loopOf.lookup(d.op) != at)
      readElsewhere.insert(d.op);
}

/// Marks the scans that no item reads at another token or in another loop
/// and that are neither outputs nor kernel results.
void Scheduler::markUnstored() {
  for (Loop &l : loops)
    for (Item &it : l.items)
      if (it.kind == Item::Scan && !readElsewhere.contains(it.op))
        it.unstored = llvm::none_of(it.op->getUsers(), [](Operation *u) {
          return isa<OutputOp, YieldOp>(u);
        });
}

/// Marks what `v` reads in this version.
void Scheduler::markLive(Value v) {
  Operation *op = v.getDefiningOp();
  if (!inKernel(v) || !live.insert(op).second)
    return;
  if (auto sel = dyn_cast<SelectOp>(op))
    if (Value arm = fixedArm(sel, version))
      return markLive(arm);
  for (Value o : op->getOperands())
    markLive(o);
}

std::vector<Loop> Scheduler::run() {
  Block &body = kernel.getBody().front();
  if (!version.empty())
    for (Operation &op : body)
      if (isa<OutputOp, YieldOp>(op))
        for (Value o : op.getOperands())
          markLive(o);
  for (Operation &op : body) {
    if (!version.empty() && isa<ScanOp, RankOp, ReduceOp>(op) &&
        !live.contains(&op))
      continue;
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
  markUnstored();
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
                                ArrayRef<Store> tokenStores,
                                const Version &version) {
  return Scheduler(kernel, storage, tokenStores, version).run();
}

/// The scalar i1 value that `v` broadcasts, or null.
static Value uniformCondition(Value v) {
  while (auto bc = v.getDefiningOp<BroadcastOp>())
    v = bc.getOperand();
  return domainOf(v) == Domain::Scalar ? v : Value();
}

Value fixedArm(SelectOp sel, const Version &version) {
  if (version.empty())
    return Value();
  Value c = uniformCondition(sel.getCondition());
  auto it = c ? version.find(c) : version.end();
  if (it == version.end())
    return Value();
  return it->second ? sel.getTrueValue() : sel.getFalseValue();
}

SmallVector<Value> versionConditions(KernelOp kernel,
                                     const DenseMap<Value, unsigned> &storage,
                                     ArrayRef<Store> tokenStores) {
  llvm::SetVector<Value> conds;
  for (auto sel : kernel.getBody().front().getOps<SelectOp>())
    if (domainOf(sel.getResult()) == Domain::Token)
      if (Value c = uniformCondition(sel.getCondition()))
        conds.insert(c);
  if (conds.empty() || conds.size() > kMaxVersionConditions)
    return {};
  // (loops, then the scans, ranks and reductions in them)
  auto cost = [&](const Version &v) {
    std::vector<Loop> loops = scheduleLoops(kernel, storage, tokenStores, v);
    size_t items = 0;
    for (const Loop &l : loops)
      items += llvm::count_if(
          l.items, [](const Item &it) { return it.kind != Item::Store; });
    return std::make_pair(loops.size(), items);
  };
  auto whole = cost(Version());
  for (unsigned bits = 0; bits < (1u << conds.size()); ++bits) {
    Version v;
    for (auto [i, c] : llvm::enumerate(conds))
      v[c] = (bits >> i) & 1;
    auto [loops, items] = cost(v);
    if (loops < whole.first || items < whole.second)
      return SmallVector<Value>(conds.begin(), conds.end());
  }
  return {};
}

} // namespace cac::lowering
