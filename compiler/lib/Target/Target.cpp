//===- Target.cpp - PTX, native code and kernel bundles -------------------===//

#include "cac/Target/Target.h"

#include "HostOptimizer.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"

using namespace mlir;

FailureOr<std::string> cac::extractPtx(ModuleOp module) {
  std::string ptx;
  module.walk([&](gpu::BinaryOp bin) {
    for (Attribute a : bin.getObjects()) {
      auto obj = cast<gpu::ObjectAttr>(a);
      ptx = obj.getObject().getValue().str();
    }
  });
  if (ptx.empty()) {
    module.emitError("no gpu.binary with PTX in the module");
    return failure();
  }
  while (!ptx.empty() && ptx.back() == '\0')
    ptx.pop_back();
  return ptx;
}

FailureOr<std::string> cac::extractManifest(ModuleOp module) {
  auto attr = module->getAttrOfType<StringAttr>("cac.manifest");
  if (!attr) {
    module.emitError("the module has no cac.manifest (run cac-lower-kernels)");
    return failure();
  }
  return attr.getValue().str();
}

static void initNativeTarget() {
  static bool done = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)done;
}

/// The host's target, or null with \p error.
static const llvm::Target *hostTarget(const std::string &triple,
                                      std::string &error) {
  initNativeTarget();
  return llvm::TargetRegistry::lookupTarget(triple, error);
}

bool cac::isKnownHostCpu(llvm::StringRef cpu, std::string &error) {
  if (cpu == kNativeCpu)
    return true;
  std::string triple = llvm::sys::getDefaultTargetTriple();
  const llvm::Target *target = hostTarget(triple, error);
  if (!target)
    return false;
  // Made for the generic CPU: made for an unknown one, LLVM would print a
  // warning of its own.
  std::unique_ptr<llvm::MCSubtargetInfo> info(
      target->createMCSubtargetInfo(triple, "generic", ""));
  if (info && info->isCPUStringValid(cpu))
    return true;
  error = ("unknown CPU '" + cpu + "' for " + triple +
           " (native, or an LLVM CPU name such as x86-64-v3 or znver3)")
              .str();
  return false;
}

/// The machine that optimizes the IR for \p cpu and compiles host.so from
/// it (position-independent code): for "native", the detected host with the
/// features it reports (a VM may hide some of its CPU model's); null where
/// the host has no target.
static std::unique_ptr<llvm::TargetMachine> hostMachine(llvm::StringRef cpu) {
  initNativeTarget();
  cac::keepHostSelects();
  if (cpu == cac::kNativeCpu) {
    auto tmb = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!tmb) {
      llvm::consumeError(tmb.takeError());
      return nullptr;
    }
    tmb->setRelocationModel(llvm::Reloc::PIC_);
    auto tm = tmb->createTargetMachine();
    if (!tm) {
      llvm::consumeError(tm.takeError());
      return nullptr;
    }
    return std::move(*tm);
  }
  std::string triple = llvm::sys::getDefaultTargetTriple(), error;
  const llvm::Target *target = hostTarget(triple, error);
  if (!target)
    return nullptr;
  return std::unique_ptr<llvm::TargetMachine>(target->createTargetMachine(
      triple, cpu, "", llvm::TargetOptions(), llvm::Reloc::PIC_));
}

/// The module in LLVM IR, optimized for \p tm (left unoptimized without
/// one).
static std::unique_ptr<llvm::Module>
translate(ModuleOp module, llvm::LLVMContext &ctx, llvm::TargetMachine *tm) {
  registerBuiltinDialectTranslation(*module.getContext());
  registerLLVMDialectTranslation(*module.getContext());
  auto llvmModule = translateModuleToLLVMIR(module, ctx);
  if (!llvmModule) {
    module.emitError("translation to LLVM IR failed");
    return nullptr;
  }
  if (!tm)
    return llvmModule;
  ExecutionEngine::setupTargetTripleAndDataLayout(llvmModule.get(), tm);
  cac::optimizeForHost(*llvmModule, *tm);
  return llvmModule;
}

FailureOr<std::string> cac::emitLlvmIr(ModuleOp module, llvm::StringRef cpu) {
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::TargetMachine> tm = hostMachine(cpu);
  auto m = translate(module, ctx, tm.get());
  if (!m)
    return failure();
  std::string s;
  llvm::raw_string_ostream os(s);
  m->print(os, nullptr);
  return os.str();
}

LogicalResult cac::emitSharedObject(ModuleOp module, llvm::StringRef soPath,
                                    llvm::StringRef cpu) {
  std::unique_ptr<llvm::TargetMachine> tm = hostMachine(cpu);
  if (!tm)
    return module.emitError("no native target for ")
           << llvm::sys::getDefaultTargetTriple();
  llvm::LLVMContext ctx;
  auto m = translate(module, ctx, tm.get());
  if (!m)
    return failure();

  llvm::SmallString<128> objPath;
  if (llvm::sys::fs::createTemporaryFile("cac-host", "o", objPath))
    return module.emitError("cannot create a temporary object file");
  {
    std::error_code ec;
    llvm::raw_fd_ostream out(objPath, ec);
    if (ec)
      return module.emitError("cannot write ") << objPath << ": "
                                               << ec.message();
    llvm::legacy::PassManager pm;
    // The code generator's ReplaceWithVeclib maps the vector math
    // intrinsics that no loop vectorizer call replaced (an SLP-vectorized
    // exp) to the same library.
    pm.add(new llvm::TargetLibraryInfoWrapperPass(cac::hostLibraryInfo(*tm)));
    if (tm->addPassesToEmitFile(pm, out, nullptr,
                                llvm::CodeGenFileType::ObjectFile))
      return module.emitError("the target cannot emit object files");
    pm.run(*m);
  }
  auto cc = llvm::sys::findProgramByName("cc");
  if (!cc)
    return module.emitError("no C compiler (cc) to link ") << soPath;
  llvm::SmallVector<llvm::StringRef> args = {*cc,    "-shared", "-o",
                                             soPath, objPath,   "-lm"};
  if (cac::hostUsesLibmvec(*tm))
    args.push_back("-lmvec");
  std::string msg;
  int rc = llvm::sys::ExecuteAndWait(*cc, args, std::nullopt, {}, 0, 0, &msg);
  llvm::sys::fs::remove(objPath);
  if (rc != 0)
    return module.emitError("linking ") << soPath << " failed: " << msg;
  return success();
}

cac::JitKernels::~JitKernels() = default;

FailureOr<std::unique_ptr<cac::JitKernels>>
cac::JitKernels::create(
    ModuleOp module,
    llvm::ArrayRef<std::pair<llvm::StringRef, void *>> symbols) {
  initNativeTarget();
  cac::keepHostSelects();
  registerBuiltinDialectTranslation(*module.getContext());
  registerLLVMDialectTranslation(*module.getContext());
  ExecutionEngineOptions opts;
  opts.transformer = makeOptimizingTransformer(3, 0, nullptr);
  auto engine = ExecutionEngine::create(module, opts);
  if (!engine) {
    std::string msg = llvm::toString(engine.takeError());
    module.emitError("JIT compilation failed: ") << msg;
    return failure();
  }
  if (!symbols.empty())
    (*engine)->registerSymbols(
        [symbols](llvm::orc::MangleAndInterner interner) {
          llvm::orc::SymbolMap map;
          for (auto [name, addr] : symbols)
            map[interner(name)] = {llvm::orc::ExecutorAddr::fromPtr(addr),
                                   llvm::JITSymbolFlags::Exported};
          return map;
        });
  auto k = std::unique_ptr<JitKernels>(new JitKernels());
  k->engine = std::move(*engine);
  return k;
}

void *cac::JitKernels::lookup(llvm::StringRef name) {
  auto fn = engine->lookup(name);
  if (!fn) {
    llvm::consumeError(fn.takeError());
    return nullptr;
  }
  return *fn;
}

LogicalResult cac::writeBundle(llvm::StringRef dir, llvm::StringRef manifest,
                               llvm::StringRef ptx, ModuleOp cpuModule,
                               llvm::StringRef cpu) {
  if (auto ec = llvm::sys::fs::create_directories(dir)) {
    llvm::errs() << "error: cannot create " << dir << ": " << ec.message()
                 << "\n";
    return failure();
  }
  auto write = [&](llvm::StringRef name, llvm::StringRef text) {
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, name);
    std::error_code ec;
    llvm::raw_fd_ostream out(path, ec);
    if (ec) {
      llvm::errs() << "error: cannot write " << path << ": " << ec.message()
                   << "\n";
      return false;
    }
    out << text;
    return true;
  };
  if (!write("manifest.json", manifest))
    return failure();
  if (!ptx.empty() && !write("kernels.ptx", ptx))
    return failure();
  if (cpuModule) {
    llvm::SmallString<256> so(dir);
    llvm::sys::path::append(so, "host.so");
    if (failed(emitSharedObject(cpuModule, so, cpu)))
      return failure();
  }
  return success();
}
