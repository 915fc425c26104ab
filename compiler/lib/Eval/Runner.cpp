//===- Runner.cpp - Run compiled CPU kernels on a batch -------------------===//

#include "cac/Eval/Runner.h"
#include "cac/Conversion/BlockKernels.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/JSON.h"

#include <numeric>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

using namespace cac;

static llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

llvm::Expected<ManifestInfo> cac::parseManifest(llvm::StringRef json) {
  auto v = llvm::json::parse(json);
  if (!v)
    return err("manifest: " + llvm::toString(v.takeError()));
  auto *o = v->getAsObject();
  if (!o || o->getString("format") != "cac-bundle-1")
    return err("manifest: not a cac-bundle-1 manifest");
  ManifestInfo m;
  m.estimator = o->getString("estimator").value_or("").str();
  m.dtype = o->getString("dtype").value_or("f32").str();
  if (m.dtype != "f32" && m.dtype != "f64")
    return err("manifest: dtype must be f32 or f64");
  if (auto *bufs = o->getArray("buffers"))
    for (auto &b : *bufs) {
      auto *bo = b.getAsObject();
      if (!bo)
        return err("manifest: buffers must be objects");
      m.buffers.push_back({bo->getString("name").value_or("").str(),
                           bo->getString("role").value_or("").str(),
                           bo->getString("domain").value_or("").str(),
                           bo->getString("layout").value_or("").str()});
    }
  if (auto *ps = o->getArray("params"))
    for (auto &p : *ps) {
      auto *po = p.getAsObject();
      if (!po)
        return err("manifest: params must be objects");
      std::optional<double> def;
      if (auto d = po->getNumber("default"))
        def = *d;
      m.params.push_back({po->getString("name").value_or("").str(), def});
    }
  if (auto *ns = o->getArray("needs"))
    for (auto &n : *ns)
      if (n.getAsString() && *n.getAsString() == "tree")
        m.needsTree = true;
  if (auto *ks = o->getArray("kernels"))
    for (auto &k : *ks) {
      auto *ko = k.getAsObject();
      if (!ko)
        return err("manifest: kernels must be objects");
      ManifestInfo::KernelInfo ki;
      ki.name = ko->getString("name").value_or("").str();
      ki.grid = ko->getString("grid").value_or("").str();
      ki.block = ko->getInteger("block").value_or(128);
      std::string unit = ko->getString("unit").value_or("thread").str();
      if (unit != "thread" && unit != "block")
        return err("manifest: kernel '" + ki.name +
                   "': \"unit\" must be \"thread\" or \"block\", not '" +
                   unit + "'");
      ki.perBlock = unit == "block";
      if (ki.perBlock && (ki.block < 1 || ki.block > 1024))
        return err("manifest: kernel '" + ki.name +
                   "': \"block\" must be in [1, 1024]");
      m.kernels.push_back(std::move(ki));
    }
  if (auto *as = o->getArray("args"))
    for (auto &a : *as) {
      auto *ao = a.getAsObject();
      if (!ao)
        return err("manifest: args must be objects");
      m.args.push_back({ao->getString("name").value_or("").str(),
                        ao->getString("kind").value_or("").str()});
    }
  return m;
}

namespace {

/// The threads of one simulated GPU block, run cooperatively on the calling
/// OS thread: each has its own stack (ucontext), runs until it reaches a
/// barrier or returns, and the next one runs. A warp barrier (inside a
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
      s.ctx.uc_link = &scheduler;
      makecontext(&s.ctx, &SimBlock::entry, 0);
    }
    const size_t n = sims.size(), warp = std::min<size_t>(32, n);
    std::vector<size_t> ready(n);
    std::iota(ready.begin(), ready.end(), size_t(0));
    uint64_t state = 0x9e3779b97f4a7c15ULL;
    auto random = [&] { // xorshift64
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      return state;
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
        swapcontext(&scheduler, &s.ctx); // back at a barrier or the end
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
    swapcontext(&s.ctx, &scheduler);
  }

  struct Sim {
    ucontext_t ctx;
    void *stack = nullptr;
    State state = State::Ready;
  };
  // The kernels keep a few scalars per thread; 256 KiB is far more than
  // they use, mapped lazily.
  static constexpr size_t kStackBytes = size_t(256) << 10;
  static size_t pageBytes() { return size_t(sysconf(_SC_PAGESIZE)); }

  static void entry() {
    SimBlock &b = *active;
    size_t tid = b.current;
    b.body(int64_t(tid), &b);
    b.sims[tid].state = State::Exited; // uc_link returns to the scheduler
  }

  static thread_local SimBlock *active;
  llvm::function_ref<void(int64_t, void *)> body;
  std::vector<Sim> sims;
  ucontext_t scheduler;
  size_t current = 0;
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
llvm::Error simulateBlocks(const ManifestInfo::KernelInfo &k, BlockFn fn,
                           void **argv) {
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

template <typename T>
llvm::Expected<std::vector<OutputArray>>
runTyped(const ManifestInfo &m,
         llvm::function_ref<void *(llvm::StringRef)> lookup,
         const Batch &batch) {
  auto params = resolveParams(batch, m.params);
  if (!params)
    return params.takeError();
  int64_t B = batch.numSeqs, N = batch.numTokens, G = batch.numGroups();
  auto sizeOf = [&](const ManifestInfo::BufferInfo &bf) -> int64_t {
    const std::string &domain = bf.domain;
    if (domain == "token" || domain == "seg")
      return N;
    if (domain == "seq")
      return B;
    if (domain == "group")
      return G;
    if (domain == "node")
      return batch.numNodes;
    return 0;
  };
  std::vector<std::vector<T>> storage(m.buffers.size());
  for (size_t i = 0; i < m.buffers.size(); ++i) {
    const auto &bf = m.buffers[i];
    storage[i].assign(size_t(std::max<int64_t>(sizeOf(bf), 1)), T(0));
    if (bf.role != "input")
      continue;
    const auto &src = bf.domain == "token" ? batch.token
                      : bf.domain == "seg" ? batch.seg
                                           : batch.seq;
    auto it = src.find(bf.name);
    if (it == src.end())
      return err("the batch has no " + bf.domain + " input '" + bf.name +
                 "' (\"" + bf.domain + "\": {\"" + bf.name + "\": ...})");
    if (bf.domain == "seg") {
      // Segment j of sequence b goes to seq_offsets[b] + j (docs/bundle.md).
      for (int64_t b = 0; b < B; ++b)
        for (int32_t k = batch.segOffsets[b]; k < batch.segOffsets[b + 1]; ++k)
          storage[i][size_t(batch.seqOffsets[b] + (k - batch.segOffsets[b]))] =
              T(it->second[size_t(k)]);
      continue;
    }
    for (size_t k = 0; k < it->second.size(); ++k)
      storage[i][k] = T(it->second[k]);
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
  std::vector<void *> ptrs(m.buffers.size());
  for (size_t i = 0; i < m.buffers.size(); ++i)
    ptrs[i] = storage[i].data();
  std::vector<void *> argv;
  size_t nextBuffer = 0, nextParam = 0;
  for (auto &[name, kind] : m.args) {
    if (name == "unit_begin")
      argv.push_back(&unitBegin);
    else if (name == "unit_end")
      argv.push_back(&unitEnd);
    else if (name == "num_seqs")
      argv.push_back(&B);
    else if (name == "num_groups")
      argv.push_back(&G);
    else if (name == "num_tokens")
      argv.push_back(&N);
    else if (name == "num_nodes")
      argv.push_back(&nNodes);
    else if (name == "seq_offsets")
      argv.push_back(&seqOffsets);
    else if (name == "seq_group")
      argv.push_back(&seqGroup);
    else if (name == "group_offsets")
      argv.push_back(&groupOffsets);
    else if (name == "group_members")
      argv.push_back(&groupMembers);
    else if (name == "node_parent")
      argv.push_back(&nodeParent);
    else if (name == "token_node")
      argv.push_back(&tokenNode);
    else if (kind == "ptr" && nextBuffer < ptrs.size())
      argv.push_back(&ptrs[nextBuffer++]);
    else if (kind == "param" && nextParam < paramValues.size())
      argv.push_back(&paramValues[nextParam++]);
    else
      return err("manifest: unexpected argument '" + name + "'");
  }
  for (const auto &k : m.kernels) {
    auto fn = lookup(k.name);
    if (!fn)
      return err("kernel '" + k.name + "' not found in the compiled code");
    unitBegin = 0;
    unitEnd = k.grid == "group" ? G : k.grid == "node" ? nNodes : B;
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
    const auto &bf = m.buffers[i];
    if (bf.role != "output")
      continue;
    OutputArray o{bf.name, bf.domain, {}};
    o.values.assign(storage[i].begin(), storage[i].begin() + sizeOf(bf));
    out.push_back(std::move(o));
  }
  return out;
}

} // namespace

std::vector<std::pair<llvm::StringRef, void *>> cac::simulationSymbols() {
  return {{kSimBarrierSymbol, reinterpret_cast<void *>(&simBarrier)},
          {kSimWarpBarrierSymbol, reinterpret_cast<void *>(&simWarpBarrier)}};
}

llvm::Expected<std::vector<OutputArray>> cac::runCpuKernels(
    const ManifestInfo &m, llvm::function_ref<void *(llvm::StringRef)> lookup,
    const Batch &batch) {
  if (m.dtype == "f64")
    return runTyped<double>(m, lookup, batch);
  return runTyped<float>(m, lookup, batch);
}
