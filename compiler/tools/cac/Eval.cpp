//===- Eval.cpp - cac eval ------------------------------------------------===//
//
// Runs an estimator or objective on one batch (docs/eager.md, the batch
// format in compiler/include/cac/Eval/Batch.h) with a backend: the compiled
// CPU kernels, the GPU's kernels with simulated threads, or the eager
// LibTorch plugin, and prints the outputs as JSON.
//
//===----------------------------------------------------------------------===//

#include "Tool.h"

#include "cac/DSL/Sema.h"
#include "cac/Dialect/Cac/IR/CacDialect.h"
#include "cac/Driver/Driver.h"
#include "cac/Eval/Batch.h"
#include "cac/Eval/Output.h"
#include "cac/Eval/Runner.h"
#include "cac/Eval/Turns.h"
#include "cac/Target/Target.h"
#ifdef CAC_EAGER_PLUGIN
#include "cac/Eager/EagerPlugin.h"
#include <cstdlib>
#include <dlfcn.h>
#endif

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/WithColor.h"

#include <cmath>
#include <optional>

using namespace mlir;

namespace cac::tool {

namespace {

#ifdef CAC_EAGER_PLUGIN
/// Loads the eager backend from lib/ beside this executable's bin/ (or the
/// file CAC_EAGER_PLUGIN names in the environment).
llvm::Expected<RunEagerFn> loadEagerPlugin() {
  std::string path;
  if (const char *env = std::getenv("CAC_EAGER_PLUGIN")) {
    path = env;
  } else {
    static int anchor;
    std::string exe = llvm::sys::fs::getMainExecutable("cac", &anchor);
    llvm::SmallString<256> p(llvm::sys::path::parent_path(
        llvm::sys::path::parent_path(exe)));
    llvm::sys::path::append(p, "lib", CAC_EAGER_PLUGIN);
    path = std::string(p);
  }
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return llvm::createStringError(
        "cannot load the eager backend (LibTorch) from " + path + ": " +
        dlerror());
  auto entry =
      reinterpret_cast<RunEagerFn (*)()>(dlsym(handle, kEagerPluginEntry));
  if (!entry)
    return llvm::createStringError(path + " has no " + kEagerPluginEntry);
  return entry();
}
#endif

/// Reads the batch of --input and applies the --param overrides.
llvm::Expected<Batch> readBatch(const ToolOptions &opts) {
  auto file = llvm::MemoryBuffer::getFileOrSTDIN(opts.inputBatch);
  if (!file)
    return llvm::createStringError("cannot read " + opts.inputBatch + ": " +
                                   file.getError().message());
  auto batch = parseBatchJson((*file)->getBuffer(), opts.inputBatch);
  if (!batch)
    return batch.takeError();
  for (const std::string &p : opts.params) {
    auto [name, value] = llvm::StringRef(p).split('=');
    double v;
    if (name.empty() || value.trim().getAsDouble(v))
      return llvm::createStringError("--param expects NAME=NUMBER, got '" + p +
                                     "'");
    // As the batch's "params": nan, inf and overflowing numbers are refused.
    if (!std::isfinite(v))
      return llvm::createStringError("--param " + name.str() +
                                     " must be a finite number, got '" +
                                     value.trim().str() + "'");
    batch->params[name.str()] = v;
  }
  return batch;
}

/// The objective `module` holds, if any.
std::optional<ObjectiveInfo> objectiveOf(ModuleOp module) {
  std::optional<ObjectiveInfo> objective;
  module->walk([&](ir::EstimatorOp est) {
    if (auto obj = est->getAttrOfType<DictionaryAttr>("cac.objective"))
      objective = ObjectiveInfo{cast<StringAttr>(obj.get("wrt")).str(),
                                cast<StringAttr>(obj.get("loss_domain")).str()};
  });
  return objective;
}

/// An objective's aggregation mode: --aggregation, else the batch's
/// parameter, else the file's default; for "seq-mean-token-sum-norm"
/// without norm_len, the batch's longest sequence becomes the normaliser's
/// length. Returns the mode, or an error message.
llvm::Expected<int> settleAggregation(const ToolOptions &opts,
                                      ModuleOp module,
                                      const std::optional<ObjectiveInfo> &obj,
                                      Batch &batch) {
  if (!opts.aggregation.empty()) {
    int code = aggregationCode(opts.aggregation);
    if (!obj || obj->lossDomain != "token" || code < 0)
      return llvm::createStringError(
          !obj ? "--aggregation applies to objectives"
          : obj->lossDomain != "token"
              ? "--aggregation applies to token losses (a seq loss is "
                "averaged over the sequences)"
              : "--aggregation must be token-mean, seq-mean-token-mean, "
                "seq-mean-token-sum or seq-mean-token-sum-norm");
    batch.params["aggregation"] = code;
  }
  int aggregation = 0;
  if (!obj || obj->lossDomain != "token")
    return aggregation;
  module->walk([&](ir::ParamOp p) {
    if (p.getName() == "aggregation")
      if (auto d = p.getDefaultValue())
        aggregation = int(d->convertToDouble());
  });
  if (auto it = batch.params.find("aggregation"); it != batch.params.end())
    aggregation = int(it->second);
  if (aggregation < 0 || aggregation > 3 ||
      (batch.params.count("aggregation") &&
       batch.params["aggregation"] != aggregation))
    return llvm::createStringError(
        "the parameter 'aggregation' must be 0 (token-mean), 1 "
        "(seq-mean-token-mean), 2 (seq-mean-token-sum) or 3 "
        "(seq-mean-token-sum-norm)");
  if (aggregation == 3 && !batch.params.count("norm_len")) {
    int64_t longest = 0;
    for (int64_t b = 0; b < batch.numSeqs; ++b)
      longest = std::max<int64_t>(longest,
                                  batch.seqOffsets[b + 1] - batch.seqOffsets[b]);
    batch.params["norm_len"] = double(longest);
  }
  return aggregation;
}

/// The compiled kernels (--backend cpu), or the GPU's with simulated threads
/// (gpu-sim), JIT-compiled and run on the batch.
llvm::Expected<std::vector<OutputArray>>
runCompiled(const ToolOptions &opts, MLIRContext &ctx, ModuleOp module,
            const Batch &batch) {
  bool sim = opts.backend == "gpu-sim";
  if (failed(runPipeline(ctx, module, [&](OpPassManager &pm) {
        if (sim)
          buildCudaSimPipeline(pm, opts.kernels);
        else
          buildCpuPipeline(pm, opts.kernels);
      })))
    return llvm::createStringError("");
  auto text = extractManifest(module);
  if (failed(text))
    return llvm::createStringError("");
  auto manifest = parseManifest(*text);
  if (!manifest)
    return manifest.takeError();
  auto jit = JitKernels::create(module, simulationSymbols());
  if (failed(jit))
    return llvm::createStringError("");
  return runCpuKernels(
      *manifest, [&](llvm::StringRef n) { return (*jit)->lookup(n); }, batch);
}

/// The outputs of --backend on `batch`.
llvm::Expected<std::vector<OutputArray>>
runBackend(const ToolOptions &opts, MLIRContext &ctx, ModuleOp module,
           const Batch &batch) {
  if (opts.backend == "eager") {
#ifdef CAC_EAGER_PLUGIN
    auto runEager = loadEagerPlugin();
    if (!runEager)
      return runEager.takeError();
    return (*runEager)(module, batch, opts.gradMode == "autograd");
#else
    return llvm::createStringError(
        "this build of cac has no eager backend (LibTorch)");
#endif
  }
  if (opts.backend == "cpu" || opts.backend == "gpu-sim")
    return runCompiled(opts, ctx, module, batch);
  return llvm::createStringError("--backend must be cpu, eager or gpu-sim");
}

/// fail() for an error; an empty message means a diagnostic was printed.
int failWith(llvm::Error e) {
  std::string msg = llvm::toString(std::move(e));
  return msg.empty() ? 1 : fail(msg);
}

} // namespace

int runEval(const ToolOptions &opts, Source &src) {
  if (opts.inputBatch.empty())
    return fail("eval needs --input batch.json");
  if (opts.dtype != "f64" && opts.dtype != "f32")
    return fail("--dtype must be f64 or f32");
  auto module = compileToCac(src.sourceMgr, src.bufferId, src.ctx,
                             opts.dtype == "f64");
  if (!module)
    return 1;
  auto batch = readBatch(opts);
  if (!batch)
    return failWith(batch.takeError());
  // Observation tokens: the estimator runs on the actions only, and its
  // token outputs are put back with 0 on the observations.
  Batch fullBatch;
  if (!batch->obs.empty()) {
    fullBatch = std::move(*batch);
    *batch = actionsOnly(fullBatch);
  }
  addTurnStarts(fullBatch.obs.empty() ? *batch : fullBatch, *batch);
  std::optional<ObjectiveInfo> objective = objectiveOf(*module);
  auto aggregation = settleAggregation(opts, *module, objective, *batch);
  if (!aggregation)
    return failWith(aggregation.takeError());
  if (opts.gradMode != "compiled" && opts.gradMode != "autograd")
    return fail("--grad must be compiled or autograd");
  if (opts.gradMode == "autograd" && (!objective || opts.backend != "eager"))
    return fail("--grad autograd needs an objective and --backend eager");
  auto outputs = runBackend(opts, src.ctx, *module, *batch);
  if (!outputs)
    return failWith(outputs.takeError());
  if (auto e = checkSegmentCounts(*batch, *outputs))
    return failWith(std::move(e));
  std::string summary;
  if (objective) {
    auto s = finishObjective(*objective, *aggregation, *batch, *outputs);
    if (!s)
      return failWith(s.takeError());
    summary = *s;
  }
  if (!fullBatch.obs.empty()) {
    expandToFull(fullBatch, *outputs);
    *batch = std::move(fullBatch);
  }
  std::vector<NonFinite> nonFinite;
  std::string json = formatOutputsJson(*batch, *outputs, summary, &nonFinite);
  if (!nonFinite.empty())
    llvm::WithColor::warning(llvm::errs(), "cac eval")
        << describeNonFinite(nonFinite) << "\n";
  return writeOutput(opts, json) ? 0 : 1;
}

} // namespace cac::tool
