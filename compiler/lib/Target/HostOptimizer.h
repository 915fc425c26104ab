//===- HostOptimizer.h - LLVM -O3 for the host's kernels --------*- C++ -*-===//
//
// The optimization of the CPU kernels' LLVM IR that `--emit=llvm` prints and
// host.so is compiled from: LLVM's -O3 pipeline for the host, whose loop
// vectorizer may call a vector math library for the libm calls of a loop.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_LIB_TARGET_HOSTOPTIMIZER_H
#define CAC_LIB_TARGET_HOSTOPTIMIZER_H

#include "llvm/Analysis/TargetLibraryInfo.h"

namespace llvm {
class Module;
class TargetMachine;
} // namespace llvm

namespace cac {

/// True where the kernels call glibc's vector math library (libmvec) for
/// the libm functions of their loops: x86-64 Linux with glibc, on a CPU
/// (\p tm's) with AVX2. host.so then links libmvec (it ships with glibc's
/// libc6 on the machines the runtime runs on).
bool hostUsesLibmvec(const llvm::TargetMachine &tm);

/// The library functions LLVM may assume for \p tm, with libmvec's vector
/// variants of exp, log, sin, cos, tan and pow where hostUsesLibmvec.
llvm::TargetLibraryInfoImpl hostLibraryInfo(const llvm::TargetMachine &tm);

/// Keeps the kernels' selects as conditional moves: turns off the x86
/// backend's conversion of a loop's cmov into a branch (a process-wide LLVM
/// option, set once). That conversion assumes predictable conditions; the
/// kernels' are data (a token's sign, a segment counter's wrap), and the
/// branches it made were mispredicted every few tokens.
void keepHostSelects();

/// Runs LLVM's -O3 pipeline for \p tm on \p m, with hostLibraryInfo, so that
/// a loop that calls expf or logf is vectorized with libmvec's 8-float
/// variants (on AVX2) instead of one scalar call per token.
void optimizeForHost(llvm::Module &m, llvm::TargetMachine &tm);

} // namespace cac

#endif // CAC_LIB_TARGET_HOSTOPTIMIZER_H
