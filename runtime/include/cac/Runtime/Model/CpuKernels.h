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

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_CPUKERNELS_H
