//===- Random.h - The runtime's one integer mixer ---------------*- C++ -*-===//
//
// Every deterministic draw of the runtime (tasks' problems, rollouts'
// uniforms, the replay buffer's order) is a pure function of a seed and some
// indices, hashed with SplitMix64, so a run reproduces across processes,
// workers and resumes without carrying generator state.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_SUPPORT_RANDOM_H
#define CAC_RUNTIME_SUPPORT_RANDOM_H

#include <cstdint>

namespace cac::rt {

/// SplitMix64's output for the state \p x (the golden-ratio increment added,
/// then the finalizer): a bijective, well-mixed hash of a 64-bit value.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// The next value of a SplitMix64 stream whose state is \p state, which it
/// advances.
inline uint64_t splitmixNext(uint64_t &state) {
  uint64_t r = splitmix64(state);
  state += 0x9e3779b97f4a7c15ULL;
  return r;
}

} // namespace cac::rt

#endif // CAC_RUNTIME_SUPPORT_RANDOM_H
