//===- Eval.cpp - cac eval ------------------------------------------------===//
//
// Runs an estimator or objective on batches (docs/eager.md, the batch
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
#include <functional>
#include <memory>
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

/// Reads the batch file \p path and applies the --param overrides.
llvm::Expected<Batch> readBatch(const ToolOptions &opts,
                                const std::string &path) {
  auto file = llvm::MemoryBuffer::getFileOrSTDIN(path);
  if (!file)
    return llvm::createStringError("cannot read " + path + ": " +
                                   file.getError().message());
  auto batch = parseBatchJson((*file)->getBuffer(), path);
  if (!batch)
    return batch.takeError();
  for (const auto &[name, value] : opts.params)
    batch->params[name] = value;
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

/// The aggregation mode the file declares as its parameter's default (0,
/// token-mean, without one). Read before the module is lowered.
int fileAggregation(ModuleOp module) {
  int aggregation = 0;
  module->walk([&](ir::ParamOp p) {
    if (p.getName() == "aggregation")
      if (auto d = p.getDefaultValue())
        aggregation = int(d->convertToDouble());
  });
  return aggregation;
}

/// An objective's aggregation mode: --aggregation, else the batch's
/// parameter, else the file's default; for "seq-mean-token-sum-norm"
/// without norm_len, the batch's longest sequence becomes the normaliser's
/// length. Returns the mode, or an error message.
llvm::Expected<int> settleAggregation(const ToolOptions &opts,
                                      int fileDefault,
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
  if (!obj || obj->lossDomain != "token")
    return 0;
  int aggregation = fileDefault;
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

/// One --input batch, ready for the backend.
struct PreparedBatch {
  std::string path;
  /// What the estimator runs on: the actions, observations removed.
  Batch batch;
  /// With observation tokens, the whole batch the outputs are put back on.
  Batch fullBatch;
  int aggregation = 0;
};

/// Reads \p path and readies it: the actions only, the turn starts, the
/// objective's aggregation (whose errors start with \p label; the reader's
/// name the file).
llvm::Expected<PreparedBatch>
prepareBatch(const ToolOptions &opts, const std::string &path,
             llvm::StringRef label, int fileDefault,
             const std::optional<ObjectiveInfo> &objective) {
  auto batch = readBatch(opts, path);
  if (!batch)
    return batch.takeError();
  PreparedBatch p;
  p.path = path;
  p.batch = std::move(*batch);
  // Observation tokens: the estimator runs on the actions only, and its
  // token outputs are put back with 0 on the observations.
  if (!p.batch.obs.empty()) {
    p.fullBatch = std::move(p.batch);
    p.batch = actionsOnly(p.fullBatch);
  }
  addTurnStarts(p.fullBatch.obs.empty() ? p.batch : p.fullBatch, p.batch);
  auto aggregation = settleAggregation(opts, fileDefault, objective, p.batch);
  if (!aggregation)
    return llvm::createStringError(label +
                                   llvm::toString(aggregation.takeError()));
  p.aggregation = *aggregation;
  return p;
}

/// Runs the backend on one batch; made once for every batch of a call.
using BatchRunner =
    std::function<llvm::Expected<std::vector<OutputArray>>(const Batch &)>;

/// The compiled kernels (--backend cpu), or the GPU's with simulated threads
/// (gpu-sim), JIT-compiled once. Lowers \p module.
llvm::Expected<BatchRunner> makeCompiledRunner(const ToolOptions &opts,
                                               MLIRContext &ctx,
                                               ModuleOp module) {
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
  auto kernels = std::shared_ptr<JitKernels>(std::move(*jit));
  auto shared = std::make_shared<abi::Manifest>(std::move(*manifest));
  return BatchRunner([kernels, shared](const Batch &batch) {
    return runCpuKernels(
        *shared, [&](llvm::StringRef n) { return kernels->lookup(n); },
        batch);
  });
}

/// The runner of --backend.
llvm::Expected<BatchRunner> makeRunner(const ToolOptions &opts,
                                       MLIRContext &ctx, ModuleOp module) {
  if (opts.backend == "eager") {
#ifdef CAC_EAGER_PLUGIN
    auto runEager = loadEagerPlugin();
    if (!runEager)
      return runEager.takeError();
    bool autograd = opts.gradMode == "autograd";
    return BatchRunner([run = *runEager, module, autograd](const Batch &b) {
      return run(module, b, autograd);
    });
#else
    return llvm::createStringError(
        "this build of cac has no eager backend (LibTorch)");
#endif
  }
  if (opts.backend == "cpu" || opts.backend == "gpu-sim")
    return makeCompiledRunner(opts, ctx, module);
  return llvm::createStringError("--backend must be cpu, eager or gpu-sim");
}

/// The JSON of one batch's outputs: the objective's loss and gradient
/// finished, observations put back; non-finite values are warned about.
llvm::Expected<std::string>
finishBatch(const std::optional<ObjectiveInfo> &objective, PreparedBatch &p,
            std::vector<OutputArray> &outputs, llvm::StringRef label) {
  if (auto e = checkSegmentCounts(p.batch, outputs))
    return std::move(e);
  std::string summary;
  if (objective) {
    auto s = finishObjective(*objective, p.aggregation, p.batch, outputs);
    if (!s)
      return s.takeError();
    summary = *s;
  }
  if (!p.fullBatch.obs.empty()) {
    expandToFull(p.fullBatch, outputs);
    p.batch = std::move(p.fullBatch);
  }
  std::vector<NonFinite> nonFinite;
  std::string json = formatOutputsJson(p.batch, outputs, summary, &nonFinite);
  if (!nonFinite.empty())
    llvm::WithColor::warning(llvm::errs(), "cac eval")
        << label << describeNonFinite(nonFinite) << "\n";
  return json;
}

/// fail() for an error; an empty message means a diagnostic was printed.
/// \p label names the batch when a call has several.
int failWith(llvm::Error e, llvm::StringRef label = "") {
  std::string msg = llvm::toString(std::move(e));
  return msg.empty() ? 1 : fail(label + msg);
}

} // namespace

int runEval(const ToolOptions &opts, Source &src) {
  if (opts.inputBatches.empty())
    return fail("eval needs --input batch.json");
  if (opts.dtype != "f64" && opts.dtype != "f32")
    return fail("--dtype must be f64 or f32");
  auto module = compileToCac(src.sourceMgr, src.bufferId, src.ctx,
                             opts.dtype == "f64");
  if (!module)
    return 1;
  std::optional<ObjectiveInfo> objective = objectiveOf(*module);
  int fileDefault = fileAggregation(*module);
  // With several batches, messages name the one they are about.
  bool several = opts.inputBatches.size() > 1;
  auto labelOf = [&](const std::string &path) {
    return several ? path + ": " : std::string();
  };
  std::vector<PreparedBatch> batches;
  for (const std::string &path : opts.inputBatches) {
    auto p = prepareBatch(opts, path, labelOf(path), fileDefault, objective);
    if (!p)
      return failWith(p.takeError());
    batches.push_back(std::move(*p));
  }
  if (opts.gradMode != "compiled" && opts.gradMode != "autograd")
    return fail("--grad must be compiled or autograd");
  if (opts.gradMode == "autograd" && (!objective || opts.backend != "eager"))
    return fail("--grad autograd needs an objective and --backend eager");
  auto runner = makeRunner(opts, src.ctx, *module);
  if (!runner)
    return failWith(runner.takeError());
  std::string out = several ? "[\n" : "";
  for (size_t i = 0; i < batches.size(); ++i) {
    PreparedBatch &p = batches[i];
    std::string label = labelOf(p.path);
    auto outputs = (*runner)(p.batch);
    if (!outputs)
      return failWith(outputs.takeError(), label);
    auto json = finishBatch(objective, p, *outputs, label);
    if (!json)
      return failWith(json.takeError(), label);
    out += *json;
    if (several)
      out.insert(out.size() - 1, i + 1 < batches.size() ? "," : "");
  }
  if (several)
    out += "]\n";
  return writeOutput(opts, out) ? 0 : 1;
}

} // namespace cac::tool
