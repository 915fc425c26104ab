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

/// "ATen AVX2, OpenBLAS Zen, 2 BLAS threads": ATen's CPU capability
/// (ATEN_CPU_CAPABILITY overrides it), OpenBLAS's core (OPENBLAS_CORETYPE
/// overrides it) and OpenBLAS's thread count (OPENBLAS_NUM_THREADS, or one per
/// core; setCpuThreads), which changes the rounding of some of its kernels
/// (Zen's); "BLAS unknown" when the BLAS in the process is not OpenBLAS.
std::string cpuKernelSet();

/// Sets ATen's intra-op pool to \p n threads and, with \p blas, OpenBLAS's
/// own pool too, which at::set_num_threads does not reach (one thread per
/// core otherwise, so that two data-parallel workers of one thread each
/// would run four busy threads on two cores). Returns whether OpenBLAS was
/// set. ATen's count does not change results; OpenBLAS's can (cpuKernelSet).
bool setCpuThreads(int n, bool blas);

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_CPUKERNELS_H
