//===- CpuModule.cpp - dlopen'ed host kernels and a small thread pool -----===//

#include "cac/Runtime/Kernels/CpuModule.h"
#include "cac/Runtime/Kernels/Manifest.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace cac::rt {

namespace {

/// A fixed set of workers that help the calling thread run the chunks of one
/// job at a time. It is never destroyed: idle workers block on a condition
/// variable and die with the process, which avoids static-destruction order
/// problems at exit. A worker that finished a job, and a caller waiting for
/// the workers, first spin for up to kSpin on the job counter (a kernel's
/// launch follows the last one's within microseconds; waking a blocked
/// thread costs tens of them, per kernel of a multi-kernel estimator).
class ThreadPool {
public:
  explicit ThreadPool(int workers) {
    for (int i = 0; i < workers; ++i)
      threads.emplace_back([this] { workerLoop(); });
  }

  int size() const { return static_cast<int>(threads.size()) + 1; }

  /// Calls fn(c) for every c in [0, numChunks) using up to `helpers` workers
  /// plus the caller; returns when all chunks are done.
  void run(int64_t numChunks, int helpers,
           const std::function<void(int64_t)> &fn) {
    // A second concurrent job (another thread running a bundle) runs on its
    // caller alone rather than waiting for the pool.
    std::unique_lock<std::mutex> submit(submitMutex, std::try_to_lock);
    if (!submit.owns_lock() || helpers <= 0) {
      for (int64_t c = 0; c < numChunks; ++c)
        fn(c);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      job = &fn;
      chunks = numChunks;
      next.store(0);
      seats = std::min<int>(helpers, static_cast<int>(threads.size()));
      accepting = true;
      generationNow.store(++generation);
    }
    wake.notify_all();
    work();
    spinUntil([this] { return activeNow.load() == 0; });
    std::unique_lock<std::mutex> lock(mutex);
    accepting = false;
    done.wait(lock, [this] { return active == 0; });
    job = nullptr;
  }

private:
  void work() {
    for (int64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1))
      (*job)(c);
  }

  /// Spins until `ready()` or kSpin has passed.
  template <typename Ready> static void spinUntil(Ready ready) {
    auto until = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0; !ready(); ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      if (i % 64 == 63 && std::chrono::steady_clock::now() > until)
        return;
    }
  }

  void workerLoop() {
    uint64_t seen = 0;
    for (;;) {
      spinUntil([&] { return generationNow.load() != seen; });
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait(lock, [&] { return generation != seen; });
      seen = generation;
      if (!accepting || seats == 0)
        continue;
      --seats;
      ++active;
      activeNow.store(active);
      lock.unlock();
      work();
      lock.lock();
      activeNow.store(--active);
      if (active == 0)
        done.notify_all();
    }
  }

  std::vector<std::thread> threads;
  std::mutex submitMutex, mutex;
  std::condition_variable wake, done;
  const std::function<void(int64_t)> *job = nullptr;
  int64_t chunks = 0;
  std::atomic<int64_t> next{0};
  int seats = 0, active = 0;
  bool accepting = false;
  uint64_t generation = 0;
  /// `generation` and `active`, read without the mutex by spinning threads.
  std::atomic<uint64_t> generationNow{0};
  std::atomic<int> activeNow{0};
  static constexpr std::chrono::microseconds kSpin{200};
};

ThreadPool &pool() {
  static ThreadPool *p = [] {
    unsigned hw = std::thread::hardware_concurrency();
    return new ThreadPool(hw > 1 ? static_cast<int>(std::min(hw, 64u)) - 1 : 0);
  }();
  return *p;
}

} // namespace

int cpuPoolThreads() { return pool().size(); }

std::unique_ptr<CpuModule>
CpuModule::load(const std::string &path,
                const std::vector<std::string> &kernels) {
  std::unique_ptr<CpuModule> m(new CpuModule());
  m->path_ = path;
  dlerror();
  m->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!m->handle_) {
    const char *err = dlerror();
    throw BundleError(path + ": cannot load the host kernels: " +
                      (err ? err : "unknown dlopen error"));
  }
  for (const std::string &name : kernels) {
    dlerror();
    void *sym = dlsym(m->handle_, name.c_str());
    const char *err = dlerror();
    if (!sym || err)
      throw BundleError(path + ": kernel '" + name +
                        "' of the manifest is not exported (dlsym: " +
                        (err ? err : "null symbol") + ")");
    m->names_.push_back(name);
    m->functions_.push_back(reinterpret_cast<KernelFn>(sym));
  }
  return m;
}

CpuModule::~CpuModule() {
  if (handle_)
    dlclose(handle_);
}

void CpuModule::launch(size_t i, int64_t numUnits, void *const *params,
                       size_t numParams, int numThreads) const {
  if (numParams <= abi::kUnitEnd)
    throw BundleError("CpuModule::launch: the argument list has no unit range");
  KernelFn fn = function(i);
  if (numUnits <= 0)
    return;

  auto runRange = [&](int64_t begin, int64_t end) {
    // Each chunk gets its own copy of the array and of the two range values.
    std::vector<void *> local(params, params + numParams);
    int64_t range[2] = {begin, end};
    local[abi::kUnitBegin] = &range[0];
    local[abi::kUnitEnd] = &range[1];
    fn(local.data());
  };

  int threads = std::max(1, std::min(numThreads, pool().size()));
  if (threads == 1 || numUnits == 1) {
    runRange(0, numUnits);
    return;
  }
  // A few chunks per thread balance units of uneven cost (long sequences).
  int64_t numChunks = std::min<int64_t>(numUnits, int64_t(threads) * 4);
  std::function<void(int64_t)> chunk = [&](int64_t c) {
    runRange(numUnits * c / numChunks, numUnits * (c + 1) / numChunks);
  };
  pool().run(numChunks, threads - 1, chunk);
}

} // namespace cac::rt
