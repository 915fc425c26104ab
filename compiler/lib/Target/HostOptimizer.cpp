//===- HostOptimizer.cpp - LLVM -O3 for the host's kernels ----------------===//
//
// MLIR's makeOptimizingTransformer builds the same -O3 pipeline, but with
// the default TargetLibraryInfo, which knows no vector math library: a loop
// calling llvm.exp.f32 is vectorized with llvm.exp.v8f32, which the backend
// splits into eight scalar expf calls. With libmvec's mappings (clang's
// -fveclib=libmvec) the vectorizer calls _ZGVdN8v_expf once per 8 tokens
// (on a CPU with AVX2; elsewhere the calls stay scalar).
//
//===----------------------------------------------------------------------===//

#include "HostOptimizer.h"

#include <mutex>

#include "llvm/IR/Module.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Triple.h"

using namespace llvm;

bool cac::hostUsesLibmvec(const TargetMachine &tm) {
  const Triple &triple = tm.getTargetTriple();
  // LLVM's libmvec table maps 8-float loops to the AVX2 variants whatever
  // the CPU, so a CPU without AVX2 keeps scalar libm.
  return triple.getArch() == Triple::x86_64 && triple.isOSLinux() &&
         triple.isGNUEnvironment() &&
         tm.getMCSubtargetInfo()->checkFeatures("+avx2");
}

TargetLibraryInfoImpl cac::hostLibraryInfo(const TargetMachine &tm) {
  TargetLibraryInfoImpl tlii(tm.getTargetTriple());
  if (hostUsesLibmvec(tm))
    tlii.addVectorizableFunctionsFromVecLib(TargetLibraryInfoImpl::LIBMVEC_X86,
                                            tm.getTargetTriple());
  return tlii;
}

void cac::keepHostSelects() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Registered by the X86 backend (X86CmovConversion.cpp) once its target
    // is initialized; absent on a host without it.
    auto &opts = cl::getRegisteredOptions();
    auto it = opts.find("x86-cmov-converter");
    if (it != opts.end())
      static_cast<cl::opt<bool> *>(it->second)->setValue(false);
  });
}

void cac::optimizeForHost(Module &m, TargetMachine &tm) {
  PipelineTuningOptions tuning;
  tuning.LoopUnrolling = true;
  tuning.LoopInterleaving = true;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  PassBuilder pb(&tm, tuning);

  LoopAnalysisManager lam;
  FunctionAnalysisManager fam;
  CGSCCAnalysisManager cgam;
  ModuleAnalysisManager mam;
  // Registered before the defaults, which then keep it.
  TargetLibraryInfoImpl tlii = hostLibraryInfo(tm);
  fam.registerPass([&] { return TargetLibraryAnalysis(tlii); });
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);

  ModulePassManager mpm =
      pb.buildPerModuleDefaultPipeline(OptimizationLevel::O3);
  mpm.run(m, mam);
}
