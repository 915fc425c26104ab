//===- Runner.cpp - Run compiled CPU kernels on a batch -------------------===//

#include "cac/Eval/Runner.h"
#include "cac/Abi/ManifestReader.h"
#include "cac/Conversion/BlockKernels.h"

#include "llvm/ADT/ScopeExit.h"

#include <csetjmp>
#include <numeric>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

using namespace cac;

static llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

llvm::Expected<abi::Manifest> cac::parseManifest(llvm::StringRef json) {
  abi::ManifestOrError read = abi::readManifest(json, "manifest");
  if (!read)
    return err(read.error);
  return std::move(*read.manifest);
}

namespace {

/// The threads of one simulated GPU block, run cooperatively on the calling
/// OS thread: each has its own stack (ucontext), runs until it reaches a
/// barrier or returns, and the next one runs. A thread starts with
/// setcontext; every later switch is _setjmp/_longjmp, which keep the
/// signal mask and so make no system call (swapcontext makes one per
/// switch). A warp barrier (inside a
/// shuffle) releases a warp once all its threads wait there; a block barrier
/// releases the block once every thread waits there. When nothing can be
/// released and not every thread has returned, the threads reached
/// different barriers (some returned, or a warp is split between barriers),
/// which on a GPU is undefined or a deadlock. The next thread to run is
/// picked at random (a fixed sequence) among the ready ones, and a warp is
/// ready again as soon as its warp barrier is complete, so warps run ahead
/// of each other as on the GPU: a missing block barrier between one
/// thread's write and another's read shows up as a wrong result.
class SimBlock {
public:
  SimBlock(int64_t threads,
           llvm::function_ref<void(int64_t tid, void *barrier)> body)
      : body(body), sims(size_t(threads)) {}
  ~SimBlock() {
    for (Sim &s : sims)
      if (s.stack)
        munmap(s.stack, kStackBytes + pageBytes());
  }

  /// Runs every thread to its end; false when they reached different
  /// barriers.
  llvm::Expected<bool> run() {
    SimBlock *outer = active;
    active = this;
    auto restore = llvm::make_scope_exit([&] { active = outer; });
    for (size_t i = 0; i < sims.size(); ++i) {
      Sim &s = sims[i];
      size_t page = pageBytes();
      void *mem = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (mem == MAP_FAILED)
        return err("gpu-sim: cannot map a stack for simulated thread " +
                   std::to_string(i));
      s.stack = mem;
      mprotect(mem, page, PROT_NONE); // a guard page below the stack
      getcontext(&s.ctx);
      s.ctx.uc_stack.ss_sp = static_cast<char *>(mem) + page;
      s.ctx.uc_stack.ss_size = kStackBytes;
      s.ctx.uc_link = nullptr;
      makecontext(&s.ctx, &SimBlock::entry, 0);
    }
    const size_t n = sims.size(), warp = std::min<size_t>(32, n);
    std::vector<size_t> ready(n);
    std::iota(ready.begin(), ready.end(), size_t(0));
    // A member, not a local: GCC cannot tell that the loop's _setjmp calls
    // leave a local that the loop changes intact (-Wclobbered).
    rng = 0x9e3779b97f4a7c15ULL;
    auto random = [this] { // xorshift64
      rng ^= rng << 13;
      rng ^= rng >> 7;
      rng ^= rng << 17;
      return rng;
    };
    for (;;) {
      // Run a random ready thread to its next barrier or its end; a warp
      // whose threads all wait at a warp barrier is ready again at once, so
      // it may run ahead of the block's other warps, as on the GPU.
      while (!ready.empty()) {
        size_t k = size_t(random() % ready.size());
        size_t i = ready[k];
        ready[k] = ready.back();
        ready.pop_back();
        Sim &s = sims[i];
        current = i;
        s.state = State::Running;
        if (_setjmp(scheduler) == 0) { // back here at a barrier or the end
          if (!s.started) {
            s.started = true;
            setcontext(&s.ctx);
          }
          _longjmp(s.jmp, 1);
        }
        if (s.state != State::AtWarp)
          continue;
        size_t w = i - i % warp, end = std::min(n, w + warp);
        bool all = true;
        for (size_t t = w; t < end && all; ++t)
          all = sims[t].state == State::AtWarp;
        if (all)
          for (size_t t = w; t < end; ++t) {
            sims[t].state = State::Ready;
            ready.push_back(t);
          }
      }
      size_t atBlock = 0, exited = 0;
      for (const Sim &s : sims) {
        atBlock += s.state == State::AtBlock;
        exited += s.state == State::Exited;
      }
      if (exited == n)
        return true;
      if (atBlock != n)
        return false; // the waiting threads are abandoned with their stacks
      for (size_t t = 0; t < n; ++t) {
        sims[t].state = State::Ready;
        ready.push_back(t);
      }
    }
  }

  /// `cac_sim_barrier`: back to the scheduler until every thread of the
  /// block waits here.
  void waitBlock() { waitAs(State::AtBlock); }
  /// `cac_sim_warp_barrier`: until every thread of the caller's warp does.
  void waitWarp() { waitAs(State::AtWarp); }

private:
  enum class State { Ready, Running, AtBlock, AtWarp, Exited };

  void waitAs(State at) {
    Sim &s = sims[current];
    s.state = at;
    if (_setjmp(s.jmp) == 0)
      _longjmp(scheduler, 1);
  }

  struct Sim {
    ucontext_t ctx;   // the thread's start, on its own stack
    std::jmp_buf jmp; // where it waits at a barrier
    void *stack = nullptr;
    State state = State::Ready;
    bool started = false;
  };
  // The kernels keep a few scalars per thread; 256 KiB is far more than
  // they use, mapped lazily.
  static constexpr size_t kStackBytes = size_t(256) << 10;
  static size_t pageBytes() { return size_t(sysconf(_SC_PAGESIZE)); }

  /// A thread's start; it never returns (its stack has no caller).
  static void entry() {
    SimBlock &b = *active;
    size_t tid = b.current;
    b.body(int64_t(tid), &b);
    b.sims[tid].state = State::Exited;
    _longjmp(b.scheduler, 1);
  }

  static thread_local SimBlock *active;
  llvm::function_ref<void(int64_t, void *)> body;
  std::vector<Sim> sims;
  std::jmp_buf scheduler;
  size_t current = 0;
  uint64_t rng = 0;
};

thread_local SimBlock *SimBlock::active = nullptr;

/// `cac_sim_barrier(ptr)` and `cac_sim_warp_barrier(ptr)` of the simulated
/// kernels.
void simBarrier(void *block) { static_cast<SimBlock *>(block)->waitBlock(); }
void simWarpBarrier(void *block) {
  static_cast<SimBlock *>(block)->waitWarp();
}

using BlockFn = void (*)(void **, int64_t, void *, void *);

/// Runs a block kernel's units with its `block` simulated threads, as one
/// GPU block runs each unit (the function loops over the units itself).
llvm::Error simulateBlocks(const abi::KernelSpec &k, BlockFn fn, void **argv) {
  // The shared memory of the block, in elements of at most 8 bytes.
  std::vector<double> shared(size_t(blockSharedElements(k.block)));
  if (auto e = simulateBlock(k.block, [&](int64_t tid, void *barrier) {
        fn(argv, tid, shared.data(), barrier);
      }))
    return llvm::make_error<llvm::StringError>(
        "kernel '" + k.name + "': " + llvm::toString(std::move(e)),
        llvm::inconvertibleErrorCode());
  return llvm::Error::success();
}

} // namespace

llvm::Error cac::simulateBlock(
    int64_t threads, llvm::function_ref<void(int64_t tid, void *barrier)> body) {
  if (threads < 1)
    return err("gpu-sim: a block needs at least one thread");
  SimBlock block(threads, body);
  llvm::Expected<bool> same = block.run();
  if (!same)
    return same.takeError();
  if (!*same)
    return err("the threads of a block reached different barriers");
  return llvm::Error::success();
}

void cac::simulationBarrier(void *barrier) { simBarrier(barrier); }
void cac::simulationWarpBarrier(void *barrier) { simWarpBarrier(barrier); }

namespace {

/// The elements of a buffer of domain `d` in `batch`.
int64_t bufferLength(abi::Domain d, const Batch &batch) {
  switch (d) {
  case abi::Domain::Token:
  case abi::Domain::Seg:
    return batch.numTokens;
  case abi::Domain::Seq:
    return batch.numSeqs;
  case abi::Domain::Group:
    return batch.numGroups();
  case abi::Domain::Node:
    return batch.numNodes;
  case abi::Domain::Batch:
    return 1;
  case abi::Domain::Scalar:
    break;
  }
  return 0;
}

/// Copies the batch's values of input `bf` into `out`.
template <typename T>
llvm::Error loadInput(const abi::BufferSpec &bf, const Batch &batch,
                      std::vector<T> &out) {
  const auto &src = bf.domain == abi::Domain::Token ? batch.token
                    : bf.domain == abi::Domain::Seg ? batch.seg
                                                    : batch.seq;
  std::string domain = abi::spelling(bf.domain);
  auto it = src.find(bf.name);
  if (it == src.end())
    return err("the batch has no " + domain + " input '" + bf.name + "' (\"" +
               domain + "\": {\"" + bf.name + "\": ...})");
  if (bf.domain == abi::Domain::Seg) {
    // Segment j of sequence b goes to seq_offsets[b] + j (docs/bundle.md).
    for (int64_t b = 0; b < batch.numSeqs; ++b)
      for (int32_t k = batch.segOffsets[b]; k < batch.segOffsets[b + 1]; ++k)
        out[size_t(batch.seqOffsets[b] + (k - batch.segOffsets[b]))] =
            T(it->second[size_t(k)]);
    return llvm::Error::success();
  }
  for (size_t k = 0; k < it->second.size(); ++k)
    out[k] = T(it->second[k]);
  return llvm::Error::success();
}

template <typename T>
llvm::Expected<std::vector<OutputArray>>
runTyped(const abi::Manifest &m,
         llvm::function_ref<void *(llvm::StringRef)> lookup,
         const Batch &batch) {
  std::vector<std::pair<std::string, std::optional<double>>> declared;
  for (const abi::ParamSpec &p : m.params)
    declared.push_back({p.name, p.defaultValue});
  auto params = resolveParams(batch, declared);
  if (!params)
    return params.takeError();
  int64_t B = batch.numSeqs, N = batch.numTokens, G = batch.numGroups();
  std::vector<std::vector<T>> storage(m.buffers.size());
  for (size_t i = 0; i < m.buffers.size(); ++i) {
    const abi::BufferSpec &bf = m.buffers[i];
    storage[i].assign(
        size_t(std::max<int64_t>(bufferLength(bf.domain, batch), 1)), T(0));
    if (bf.role == abi::BufferRole::Input)
      if (auto e = loadInput(bf, batch, storage[i]))
        return std::move(e);
  }
  std::vector<T> paramValues(params->begin(), params->end());

  // Argument values, then the void* array pointing at them.
  int64_t unitBegin = 0, unitEnd = 0, nNodes = batch.numNodes;
  if (m.needsTree && batch.nodeParent.empty())
    return err("the estimator needs a rollout tree: give \"tree\": "
               "{\"parent\": [...], \"node\": [[...], ...]} in the batch");
  const int32_t *nodeParent = batch.nodeParent.data();
  const int32_t *tokenNode = batch.tokenNode.data();
  const int32_t *seqOffsets = batch.seqOffsets.data();
  const int32_t *seqGroup = batch.seqGroup.data();
  const int32_t *groupOffsets = batch.groupOffsets.data();
  const int32_t *groupMembers = batch.groupMembers.data();
  void *fixed[abi::kNumFixed];
  fixed[abi::kUnitBegin] = &unitBegin;
  fixed[abi::kUnitEnd] = &unitEnd;
  fixed[abi::kNumSeqs] = &B;
  fixed[abi::kNumGroups] = &G;
  fixed[abi::kNumTokens] = &N;
  fixed[abi::kNumNodes] = &nNodes;
  fixed[abi::kSeqOffsets] = &seqOffsets;
  fixed[abi::kSeqGroup] = &seqGroup;
  fixed[abi::kGroupOffsets] = &groupOffsets;
  fixed[abi::kGroupMembers] = &groupMembers;
  fixed[abi::kNodeParent] = &nodeParent;
  fixed[abi::kTokenNode] = &tokenNode;
  std::vector<void *> ptrs(m.buffers.size());
  for (size_t i = 0; i < m.buffers.size(); ++i)
    ptrs[i] = storage[i].data();
  std::vector<void *> argv;
  for (const abi::ArgSpec &a : m.args) {
    size_t i = size_t(a.index);
    switch (a.source) {
    case abi::ArgSource::Fixed:
      argv.push_back(fixed[i]);
      break;
    case abi::ArgSource::Buffer:
      argv.push_back(&ptrs[i]);
      break;
    case abi::ArgSource::Param:
      argv.push_back(&paramValues[i]);
      break;
    }
  }
  for (const abi::KernelSpec &k : m.kernels) {
    auto fn = lookup(k.name);
    if (!fn)
      return err("kernel '" + k.name + "' not found in the compiled code");
    unitBegin = 0;
    unitEnd = k.grid == abi::Grid::Group   ? G
              : k.grid == abi::Grid::Node  ? nNodes
              : k.grid == abi::Grid::Batch ? 1
                                           : B;
    // The GPU's blocks: a split kernel's sequences over several each.
    unitEnd = abi::launchUnits(k, unitEnd, B);
    if (k.perBlock) {
      if (auto e = simulateBlocks(k, reinterpret_cast<BlockFn>(fn),
                                  argv.data()))
        return std::move(e);
    } else {
      reinterpret_cast<void (*)(void **)>(fn)(argv.data());
    }
  }
  std::vector<OutputArray> out;
  for (size_t i = 0; i < m.buffers.size(); ++i) {
    const abi::BufferSpec &bf = m.buffers[i];
    if (bf.role != abi::BufferRole::Output)
      continue;
    OutputArray o{bf.name, abi::spelling(bf.domain), {}};
    o.values.assign(storage[i].begin(),
                    storage[i].begin() + bufferLength(bf.domain, batch));
    out.push_back(std::move(o));
  }
  return out;
}

} // namespace

std::vector<std::pair<llvm::StringRef, void *>> cac::simulationSymbols() {
  return {{kSimBarrierSymbol, reinterpret_cast<void *>(&simBarrier)},
          {kSimWarpBarrierSymbol, reinterpret_cast<void *>(&simWarpBarrier)}};
}

llvm::Expected<std::vector<OutputArray>>
cac::runCpuKernels(const abi::Manifest &m,
                   llvm::function_ref<void *(llvm::StringRef)> lookup,
                   const Batch &batch) {
  if (m.dtype == abi::DType::F64)
    return runTyped<double>(m, lookup, batch);
  return runTyped<float>(m, lookup, batch);
}
