//===- HostOptimizer.cpp - LLVM -O3 for the host's kernels ----------------===//
//
// MLIR's makeOptimizingTransformer builds the same -O3 pipeline, but with
// the default TargetLibraryInfo, which knows no vector math library: a loop
// calling llvm.exp.f32 is vectorized with llvm.exp.v8f32, which the backend
// splits into eight scalar expf calls. With libmvec's mappings (clang's
// -fveclib=libmvec) the vectorizer calls _ZGVdN8v_expf once per 8 tokens.
//
//===----------------------------------------------------------------------===//

#include "HostOptimizer.h"

#include "llvm/IR/Module.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Triple.h"

using namespace llvm;

bool cac::hostUsesLibmvec(const Triple &triple) {
  return triple.getArch() == Triple::x86_64 && triple.isOSLinux() &&
         triple.isGNUEnvironment();
}

TargetLibraryInfoImpl cac::hostLibraryInfo(const Triple &triple) {
  TargetLibraryInfoImpl tlii(triple);
  if (hostUsesLibmvec(triple))
    tlii.addVectorizableFunctionsFromVecLib(TargetLibraryInfoImpl::LIBMVEC_X86,
                                            triple);
  return tlii;
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
  TargetLibraryInfoImpl tlii = hostLibraryInfo(Triple(m.getTargetTriple()));
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
