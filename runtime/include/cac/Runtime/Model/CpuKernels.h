//===- CpuKernels.h - Which CPU kernels LibTorch runs on ---------*- C++ -*-===//
//
// The floating-point results of a training run depend on the CPU kernels
// LibTorch picks at run time: ATen's vectorised kernels (AVX2 or AVX-512) and
// the BLAS behind its matrix products (OpenBLAS chooses a kernel per CPU
// model). A seed reproduces a run bit for bit only on the same kernels, so
// cac-run reports them and records them in its checkpoints.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_CPUKERNELS_H
#define CAC_RUNTIME_MODEL_CPUKERNELS_H

#include <string>

namespace cac::rt {

/// "ATen AVX2, OpenBLAS Zen": ATen's CPU capability (ATEN_CPU_CAPABILITY
/// overrides it) and OpenBLAS's core (OPENBLAS_CORETYPE overrides it), or
/// "BLAS unknown" when the BLAS in the process is not OpenBLAS.
std::string cpuKernelSet();

/// Runs LibTorch on \p n threads: ATen's intra-op pool and, when the BLAS is
/// OpenBLAS, OpenBLAS's own thread pool, which at::set_num_threads does not
/// reach (it would otherwise use every core, so that two data-parallel
/// workers of one thread each ran four busy threads on two cores). Returns
/// whether the BLAS was set too. A matrix product's elements are each
/// computed by one thread, so results do not depend on \p n.
bool setCpuThreads(int n);

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_CPUKERNELS_H
