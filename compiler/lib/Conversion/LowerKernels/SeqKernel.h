//===- SeqKernel.h - Seq kernels: one unit per sequence ---------*- C++ -*-===//
//
// A seq kernel's token values are not stored unless they must be (outputs,
// values later kernels read, scans): they are expressions evaluated on demand
// at a token index (TokenExpr.cpp) inside the loops of its schedule
// (Schedule.cpp). A loop is walked by one thread (SerialLoop.cpp; on the CPU
// a loop of scans in chunks, ChunkedScans.cpp) or, in a
// block-per-sequence kernel, by the block's threads tile by tile
// (BlockLoop.cpp, with the block-wide scans and reductions of
// BlockPrimitives.cpp); ranks are radix sorts before their loop
// (RankSort.cpp), or radix selects where only top_k reads them
// (TopKSelect.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_CONVERSION_LOWERKERNELS_SEQKERNEL_H
#define CAC_CONVERSION_LOWERKERNELS_SEQKERNEL_H

#include "Emitter.h"
#include "KernelTarget.h"
#include "Schedule.h"

#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallSet.h"

#include <tuple>

namespace cac::lowering {

/// The largest integer below which every integer of the float type `ft`,
/// and every sum of two of them, is exact: 2^23 in f32, 2^52 in f64.
double exactLimit(Type ft);

class SeqKernelEmitter {
public:
  /// `threads`: the block that runs a unit, or null for one thread;
  /// `fusedGroups`: the group kernels whose values this kernel computes.
  SeqKernelEmitter(Emitter &e, KernelOp kernel, const Abi &abi,
                   const KernelTarget &target, ArrayRef<Store> tokenStores,
                   ArrayRef<Store> seqStores, const BlockThreads *threads,
                   ArrayRef<KernelOp> fusedGroups)
      : e(e), b(e.b), kernel(kernel), abi(abi), target(target),
        tokenStores(tokenStores), seqStores(seqStores), threads(threads),
        fusedGroups(fusedGroups) {}

  /// The kernel's body for sequence `unit`, at the insertion point.
  void emit(Value unit);

  /// Splits each sequence over splitParts(split, num_seqs) blocks
  /// (SeqSplit.cpp; only for a splittable kernel with a block): the unit
  /// is then (sequence, part), and each part walks a run of the sequence's
  /// tiles. With `carries`, the body is the NAME_carries kernel's: each
  /// part's composition of each scan's steps, which the later parts read.
  void splitInto(int64_t split, bool carries) {
    this->split = split;
    carriesPass = carries;
  }

private:
  bool inKernel(Value v) { return definedIn(kernel, v); }

  // SeqKernel.cpp: the unit, its versions, seq-level values, reductions.
  void emitVersions(ArrayRef<Value> conds, const DenseMap<Value, Value> &outer);
  void emitBody();
  void emitFusedGroups();
  void prepareOuter(Value v, DenseSet<Value> &seen);
  void prepareLoopOuter(Loop &l);
  Value reduceInit(ReduceOp red);
  Value reduceStep(ReduceOp red, Value acc, Value x, Value t);
  Value reduceFinish(ReduceOp red, Value acc);

  // SerialLoop.cpp: a loop walked by one thread.
  static constexpr int64_t kUnroll = 4;
  bool unrolls(const Loop &l);
  bool readsBehind(const Loop &l);
  static bool isConstant(Value v, double x);
  bool isTokenInvariant(Value v);
  static bool isChainReduce(ReduceOp red);
  void emitLoop(size_t index);
  SmallVector<Value> emitLoopTokens(Loop &l, SmallVector<Value> carried);
  SmallVector<Value> emitTokenLoop(Loop &l, Value lo, Value hi, int64_t step,
                                   ArrayRef<Value> inits, bool backInRange);
  void emitTokenItems(Loop &l, ArrayRef<Value> ts, ArrayRef<Value> at,
                      ValueRange args, SmallVectorImpl<Value> &yields);
  Value emitScanStep(Operation *scan, ArrayRef<Value> ts, Value prev,
                     std::optional<unsigned> buffer);
  Value emitReduceStep(const Item &it, ArrayRef<Value> ts, Value acc);

  // ChunkedScans.cpp: a one-thread loop of scans in chunks, with each
  // level's scans' inputs computed by a loop of their own and the stores
  // and sums that read the scans by another (loops without a carried value,
  // which LLVM vectorizes), around the scans' own loops.
  static constexpr int64_t kChunkUnroll = 8;
  bool takesChunks(const Loop &l);
  unsigned scanLevels(const Loop &l);
  SmallVector<Value> emitChunkedLoop(Loop &l, Value lo, Value hi,
                                     ArrayRef<Value> carried, bool backInRange);
  void emitChunkLevel(Loop &l, Value chunkEnd, SmallVectorImpl<Value> &scanned,
                      bool backInRange);
  void chunkScratch(Loop &l);
  SmallVector<Value> finishChunks(scf::ForOp chunks);
  void memoizeChunk(Loop &l, ArrayRef<Value> ts, ArrayRef<Value> at);
  void storeScanInputs(const Item &it, ArrayRef<Value> ts, ArrayRef<Value> at);
  void storeScanValues(const Item &it, ArrayRef<Value> ts, ArrayRef<Value> at);

  // ChunkedGroupSums.cpp: a chunk's group_pos_sums, member by member.
  SmallVector<Operation *> posSumsOf(const Loop &l);
  void emitPosSumArrays(Loop &l, Value chunkEnd);

  // SerialCounters.cpp: modulos of counting scans as wrapping counters.
  /// `mod(S - c, n)` for a counting scan S of the loop (decay 1, steps of 0
  /// or 1), a literal integer c and a token-invariant n: evaluated at the
  /// loop's tokens by a counter carried through the loop, which steps with S
  /// and wraps at n, instead of a division and a floor per token.
  struct ModCounter {
    Value mod;
    Operation *scan;
    double c;
    Value n;
  };
  SmallVector<ModCounter> modCounters(const Loop &l);
  Value countersApply(ArrayRef<ModCounter> cs);
  Value counterInit(const ModCounter &c);
  SmallVector<Value> emitCounterSteps(Operation *scan, ArrayRef<Value> ts,
                                      ValueRange prev);

  // IntegerScans.cpp: scans and sums of 0/1 values as integers, replayed
  // scans, dead scan stores.
  bool isBitValued(Value v);
  Value bitTok(Value v, Value t);
  bool isIntScan(Operation *op);
  bool isIntSum(const Item &it);
  bool countsInts(const Loop &l);
  using ScanReads = DenseMap<Operation *, llvm::SmallSet<int64_t, 2>>;
  bool scanReads(Value v, int64_t off, ScanReads &reads,
                 DenseSet<std::pair<Value, int64_t>> &seen);
  SmallVector<Operation *> replaysOf(size_t loop);
  Value intInit(const Item &it);
  Value emitIntScanStep(Operation *scan, ArrayRef<Value> ts, Value prev,
                        std::optional<unsigned> buffer);
  Value emitIntSumStep(const Item &it, ArrayRef<Value> ts, Value acc);
  Value intCount(Value v, Value t);
  void eraseDeadScanStores();

  // NodeRuns.cpp: a loop of token stores reading node values, in chunks
  // whose tokens share a node.
  bool takesNodeRuns(const Loop &l);
  void emitNodeRuns(Loop &l);
  void emitRunTokens(Loop &l, Value lo, Value hi, bool sameNode);

  // BlockLoop.cpp: a loop walked by a block's threads, tile by tile.
  void emitBlockLoop(Loop &l);
  void emitBlockRanks(Loop &l);
  SmallVector<Value> emitTileItems(Loop &l, ValueRange carried,
                                   ArrayRef<Value> ts, ArrayRef<Value> ins,
                                   bool striped);
  Value emitTileScan(const Item &it, Value prev, ArrayRef<Value> ts,
                     ArrayRef<Value> ins, bool striped);
  void emitTilePrefetch(const llvm::SetVector<Value> &loads, Value base,
                        Value tileLen, Value lastTok, bool reverse);
  void finishBlockReductions(Loop &l, scf::ForOp forOp);
  /// The tiles a block loop walks: size * items tokens each (`tileLen`),
  /// and how many cover the sequence (`tiles`).
  struct Tiles {
    Value tileLen, tiles;
  };
  Tiles blockTiles();
  /// Where this thread starts in a tile (`first`: tid when striped, else
  /// tid * items) and the sequence's last position and token, which
  /// tileTokens clamps to.
  struct TileStart {
    Value first, lastPos, lastTok;
  };
  TileStart tileStart(bool striped);
  void tileTokens(Value base, int64_t stride, Value lastPos, Value lastTok,
                  bool reverse, SmallVectorImpl<Value> &ts,
                  SmallVectorImpl<Value> &ins);
  std::pair<Value, Value> affineAfter(Value ea, Value eb, Value la, Value lb);
  Value applyAffine(Value a, Value bv, Value y);

  // SeqSplit.cpp: a sequence's tiles over several blocks.
  /// A part's tiles [lo, hi) of the sequence's `tiles` and the tokens of a
  /// whole part.
  struct PartTiles {
    Value lo, hi, partLen;
  };
  Value splitUnit(Value unit);
  PartTiles partTiles(Value tiles, Value tileLen);
  Value tokenAt(Value pos, bool reverse);
  void splitCarries(Loop &l, const PartTiles &pt, Value tiles,
                    SmallVectorImpl<Value> &inits);
  void emitBlockCarries(Loop &l);
  /// Whether this thread stores the sequence's seq-level values.
  Value seqStorer();

  // BlockPrimitives.cpp: block-wide scans and reductions.
  Value isThread0();
  Value sharedAt(Value i) { return e.ptrAt(threads->shared, i, e.ft); }
  Value loadShared(Value i);
  void storeShared(Value v, Value i);
  std::tuple<Value, Value, Value, Value> blockScan(Value a, Value bv);
  Value blockReduce(ReduceOp red, Value acc) {
    return blockReduce(red.getKind(), acc);
  }
  Value blockReduce(ReduceKind kind, Value acc);
  SmallVector<Value> blockDigitSlots(ArrayRef<Value> counts);

  // RankSort.cpp: ranks as radix sorts.
  Value rankKey(Value x);
  void emitRankSortBlock(RankOp rank);
  void emitRankSort(RankOp rank);

  // TopKSelect.cpp: a rank read only as top_k, as a radix select.
  using CutFn = std::pair<Value, Value>(Value);
  Value topKCount(Value kv);
  void emitTopKCut(RankOp rank, Value m, llvm::function_ref<CutFn> some);
  void emitTopKSelect(RankOp rank, Value kv);
  void emitTopKSelectBlock(RankOp rank, Value kv);
  SmallVector<Value> blockHandOver(Value cond, ArrayRef<Value> vs);
  Value blockPrefixSum(Value c);
  Value blockTie(RankOp rank, Value key, Value r);
  Value topKTest(RankOp rank, Value t);
  Value topKMember(CmpOp cmp, Value t);

  // GroupReads.cpp: values read at the other sequences of the group.
  Value groupRank(GroupRankOp r);
  Value groupKey(GroupKeyOp k);
  Value memberValue(Value v, Value j, Value tok);
  Value groupPosSum(GroupPosSumOp s, Value t);

  // BatchSelect.cpp: batch_top_k's flags and the uniform draw at a token.
  struct BatchCut {
    Value some, kth, key; ///< whether it selects, the k-th token, its key
  };
  BatchCut batchCut(BatchTopKOp op);
  Value batchTopK(BatchTopKOp op, Value t);
  Value uniform(UniformOp op, Value t);

  // TokenExpr.cpp: values at a token and seq-level values.
  Value evalOuter(Value v);
  Value computeOuter(Value v);
  Value evalTok(Value v, Value t);
  Value computeTok(Value v, Value t);
  bool costlyToRecompute(Value v, DenseSet<Value> &seen);
  void noteStores(const Loop &l);
  void reachedFrom(Value v, DenseSet<Value> &seen);
  DenseSet<Value> reachedBy(const Loop &l);
  Value shiftTok(ShiftOp s, Value t);
  std::pair<Value, Value> shiftIndexFrom(Value t, int64_t offset);
  static arith::CmpIPredicate intPredicate(CmpOp cmp);
  Value intTok(Value v, Value t);
  Value computeIntTok(Value v, Value t);
  /// Forgets every value memoized at a token index, before the indices
  /// change (a new loop iteration, a new region).
  void forgetTokens();

  Emitter &e;
  OpBuilder &b;
  KernelOp kernel;
  const Abi &abi;
  /// Compare and sum policies (KernelTarget).
  const KernelTarget &target;
  ArrayRef<Store> tokenStores, seqStores;
  const BlockThreads *threads;
  ArrayRef<KernelOp> fusedGroups;
  std::vector<Loop> loops;
  /// The uniform conditions fixed in the version being emitted.
  Version version;
  /// Token values that an earlier loop stored and that would cost more to
  /// recompute than to load (noteStores), with their buffers.
  DenseMap<Value, unsigned> storedEarlier;
  Value unit, start, end, len, group;
  DenseMap<Value, Value> outerMemo;
  DenseMap<std::pair<Value, Value>, Value> tokenMemo;
  DenseMap<std::pair<Value, Value>, Value> intMemo;
  /// Each selected rank's cut (TopKSelect.cpp): the key K and the last
  /// token whose key is K that top_k takes.
  DenseMap<Operation *, std::pair<Value, Value>> topKCuts;
  /// Each batch_top_k's cut, computed before the loops that read it.
  DenseMap<Operation *, BatchCut> batchCuts;
  /// The buffer of each selected rank's flags, where one thread stored them.
  DenseMap<Operation *, Value> topKFlags;
  /// The shifts of a nest that index from the index they are given
  /// (shiftTok); deeper ones index from the nest's base token.
  static constexpr unsigned kPathShifts = 3;
  /// A token index that shifts made: `offset` tokens from the token `base`
  /// through `depth` nested shifts.
  struct ShiftedIndex {
    Value base;
    int64_t offset;
    unsigned depth;
  };
  /// The indices shifts made (shiftTok), and the one made for each (base,
  /// offset) of the shifts nested deeper than kPathShifts, with its
  /// in-range flag.
  DenseMap<Value, ShiftedIndex> shiftedFrom;
  DenseMap<std::pair<Value, int64_t>, std::pair<Value, Value>> nestedIndex;
  /// In a CPU loop past its first token: each token of the iteration -> the
  /// token one step back, already computed in this iteration (null for the
  /// iteration's first token: one step back is the previous iteration's).
  DenseMap<Value, Value> back;
  int64_t backOffset = 0;
  /// seq-split's target number of blocks (0: one block per sequence), and
  /// whether this is the NAME_carries kernel; in a split kernel the unit's
  /// part and the sequence's number of parts.
  int64_t split = 0;
  bool carriesPass = false;
  Value part, parts;
  /// In a chunk whose tokens share a node (NodeRuns.cpp): the token of the
  /// iteration, and each node value loaded at that node before the chunk.
  Value runToken;
  DenseMap<Value, Value> runValues;
  /// While a tile's body is emitted: the token buffers it reads.
  llvm::SetVector<Value> *tileLoads = nullptr;
  /// The wrapping counters of the serial loop being emitted (their carried
  /// values follow the items' in the loop's iteration arguments).
  SmallVector<ModCounter> counters;
  /// In the integer copy of a serial loop (IntegerScans.cpp) its scans and
  /// sums of 0/1 values are carried as i64. The scans of earlier loops in
  /// `replayed` are counted again in both copies, as integers and as floats
  /// (their carried values follow the counters').
  bool intMode = false;
  SmallVector<Operation *> replayed;
  /// The stores of each scan and the scans loaded from their buffers, in the
  /// version being emitted: a scratch scan that nothing loads is not stored.
  DenseMap<Operation *, SmallVector<Operation *>> scanStores;
  DenseSet<Operation *> loadedScans;
  /// Which items a token loop of a chunked loop (ChunkedScans.cpp) takes:
  /// all of them (an unchunked loop), the scans' inputs, the scans, or the
  /// stores and reductions after them.
  enum class Phase { All, Inputs, Scans, After } phase = Phase::All;
  /// In a chunked loop: the chunk's first position, and each scan's arrays
  /// of kChunk floats in the function's entry block: its input and decay
  /// at the chunk's tokens (null where read directly) and its values (null
  /// where stored in its buffer).
  Value chunkBase;
  struct ChunkArrays {
    Value input, decay, value;
    unsigned level = 0; ///< the scan's level (ChunkedScans.cpp)
  };
  DenseMap<Operation *, ChunkArrays> chunkArrays;
  /// The level whose scans a chunk's walk of inputs or scans takes.
  unsigned chunkLevel = 0;
  /// In a chunked loop: the array of each group_pos_sum its items read.
  llvm::MapVector<Operation *, Value> posSumArrays;
  /// The arrays in the kernel function's entry block (one emitter builds
  /// one function), which its chunked loops share.
  SmallVector<Value> chunkPool;
};

} // namespace cac::lowering

#endif // CAC_CONVERSION_LOWERKERNELS_SEQKERNEL_H
