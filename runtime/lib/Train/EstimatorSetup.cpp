//===- EstimatorSetup.cpp - The estimator and objective bundles -----------===//
//
// Compiles (rank 0) and loads the estimator bundle and the compiled
// objective, and checks what they read and write against the training
// file and the inputs cac-run provides (TrainerInputs.h).
//
//===----------------------------------------------------------------------===//

#include "TrainerInputs.h"

#include "cac/Runtime/Support/Process.h"

namespace fs = std::filesystem;

namespace cac::rt::train {

namespace {

/// Compiles \p src into the bundle folder \p target (and \p ptx) with the
/// run's `cac`: rank 0 compiles, the other workers wait for it and load its
/// bundle. False after a diagnostic at \p loc.
bool compileBundle(TrainerState &s, DiagnosticEngine &diag, SourceLoc loc,
                   const fs::path &src, const fs::path &ptx,
                   const fs::path &target) {
  // No estimator compiles for long (compile time is linear in the source):
  // past this, something hangs (a FIFO, a device), and the run must stop.
  const std::string limit = "600";
  int rc = 0;
  if (s.world.writer())
    rc = runProcess({s.opts.compiler.string(), "compile", src.string(), "-o",
                     ptx.string(), "--bundle", target.string(),
                     "--time-limit=" + limit});
  if (rc != 0) {
    diag.error(loc, "compiling '" + src.string() + "' with '" +
                        s.opts.compiler.string() + "' failed (exit status " +
                        std::to_string(rc) + "; the compiler stops after " +
                        limit + " s)");
    return false;
  }
  s.world.barrier();
  return true;
}

bool checkParams(TrainerState &s, DiagnosticEngine &diag, const Manifest &m) {
  EstimatorSetup &e = s.est;
  bool ok = true;
  // Every given one must exist; every required one be given.
  for (const auto &p : s.cfg.estimator.params) {
    if (m.findParam(p.name) < 0) {
      std::vector<std::string> names = e.estimator->paramNames();
      std::string list;
      for (const auto &n : names)
        list += (list.empty() ? "" : ", ") + n;
      diag.error(p.loc, "estimator '" + m.estimator + "' has no parameter '" +
                            p.name + "'" +
                            (list.empty() ? " (it has none)"
                                          : " (parameters: " + list + ")"));
      ok = false;
      continue;
    }
    e.params[p.name] = p.value;
  }
  for (const auto &ps : m.params)
    if (!ps.defaultValue && !e.params.count(ps.name)) {
      diag.error(s.cfg.estimator.loc,
                 "estimator '" + m.estimator + "' needs the parameter '" +
                     ps.name + "' (it has no default): write cac(\"...\", " +
                     ps.name + " = VALUE)");
      ok = false;
    }
  return ok;
}

/// The estimator's inputs and outputs; \p readsValue: it reads `value`.
bool checkBuffers(TrainerState &s, DiagnosticEngine &diag, const Manifest &m,
                  bool &readsValue) {
  EstimatorSetup &e = s.est;
  bool ok = true;
  for (const auto &b : m.buffers) {
    if (b.role != BufferRole::Input)
      continue;
    if (!findEstimatorInput(b.name, b.domain)) {
      diag.error(s.cfg.estimator.loc,
                 "estimator '" + m.estimator + "' reads the input '" + b.name +
                     " : " + domainName(b.domain) +
                     "', which cac-run does not provide (it provides " +
                     estimatorInputList() + ")");
      ok = false;
    }
    if (b.name == "value") {
      readsValue = true;
      e.promptCritic = b.domain == Domain::Seq;
    }
    if (b.name == "mc_value")
      e.readsMc = true;
    if (b.name == "reward")
      e.denseReward = b.domain == Domain::Token;
    if (b.name == "logp_ref")
      s.models.needReference = true;
  }
  int adv = m.findBuffer("adv");
  if (adv < 0 || m.buffers[adv].role != BufferRole::Output ||
      (m.buffers[adv].domain != Domain::Token &&
       m.buffers[adv].domain != Domain::Seq)) {
    diag.error(s.cfg.estimator.loc,
               "estimator '" + m.estimator +
                   "' must have an output 'adv' on token or seq (the "
                   "advantage the policy loss uses)");
    ok = false;
  } else {
    e.advDomain = m.buffers[adv].domain;
  }
  auto tokenOutput = [&](const char *name) {
    int i = m.findBuffer(name);
    return i >= 0 && m.buffers[i].role == BufferRole::Output &&
           m.buffers[i].domain == Domain::Token;
  };
  e.hasRet = tokenOutput("ret");
  e.hasWeight = tokenOutput("weight");
  e.hasValueWeight = tokenOutput("value_weight");
  return ok;
}

bool checkCritic(TrainerState &s, DiagnosticEngine &diag, const Manifest &m,
                 bool readsValue) {
  const TrainConfig &cfg = s.cfg;
  bool ok = true;
  std::string err =
      planMismatch(cfg.rollout, m.estimator, s.est.readsMc, m.needsTree,
                   cfg.critic.kind != CriticSpec::Kind::None);
  if (!err.empty()) {
    diag.error(cfg.rollout.loc.valid() ? cfg.rollout.loc : cfg.estimator.loc,
               err);
    ok = false;
  }
  SourceLoc criticLoc =
      cfg.critic.loc.valid() ? cfg.critic.loc : cfg.estimator.loc;
  if (readsValue && cfg.critic.kind == CriticSpec::Kind::None) {
    diag.error(criticLoc, "estimator '" + m.estimator +
                              "' reads the token input 'value': set critic = "
                              "value_head(...) or value_model(...)");
    ok = false;
  }
  if (!readsValue && cfg.critic.kind != CriticSpec::Kind::None) {
    diag.error(criticLoc, "a critic is set but estimator '" + m.estimator +
                              "' reads no token input 'value'; use "
                              "critic = none");
    ok = false;
  }
  if (readsValue && !s.est.hasRet && !s.est.promptCritic) {
    diag.error(cfg.estimator.loc,
               "estimator '" + m.estimator +
                   "' reads 'value' but has no token output 'ret' to "
                   "train the critic on");
    ok = false;
  }
  return ok;
}

} // namespace

bool loadEstimator(TrainerState &s, DiagnosticEngine &diag) {
  const EstimatorSpec &spec = s.cfg.estimator;
  EstimatorSetup &e = s.est;
  fs::path dir = spec.path;
  if (spec.kind == EstimatorSpec::Kind::Source) {
    if (s.opts.compiler.empty()) {
      diag.error(spec.loc,
                 "no `cac` compiler to compile '" + dir.string() +
                     "': put cac-run next to `cac` (or set CAC_COMPILER), "
                     "or give a bundle compiled elsewhere: "
                     "bundle(\"DIR\") from `cac compile FILE.cac --bundle "
                     "DIR`");
      return false;
    }
    fs::path bundles = s.cfg.out / "bundles";
    fs::create_directories(bundles);
    fs::path target = bundles / spec.path.stem();
    if (!compileBundle(s, diag, spec.loc, spec.path,
                       bundles / (spec.path.stem().string() + ".ptx"), target))
      return false;
    dir = target;
  }
  try {
    e.bundle = Bundle::load(dir.string());
  } catch (const std::exception &ex) {
    diag.error(spec.loc,
               std::string("cannot load the estimator bundle: ") + ex.what());
    return false;
  }
  e.estimator.emplace(e.bundle);
  const Manifest &m = e.bundle->manifest();
  bool ok = true;
  if (s.device().is_cuda() && !e.bundle->hasCuda()) {
    diag.error(spec.loc,
               "the estimator bundle '" + dir.string() +
                   "' has no kernels.ptx, so it cannot run on " +
                   s.device().str() +
                   ": compile it again with `cac compile FILE.cac -o "
                   "FILE.ptx --bundle DIR` (which writes kernels.ptx), or "
                   "train with --device cpu");
    ok = false;
  }
  if (!checkParams(s, diag, m))
    ok = false;
  bool readsValue = false;
  if (!checkBuffers(s, diag, m, readsValue))
    ok = false;
  if (!checkCritic(s, diag, m, readsValue))
    ok = false;
  return ok;
}

namespace {

/// The objective's inputs (TrainerInputs.h) against the estimator and the
/// critic.
bool checkObjectiveInputs(TrainerState &s, DiagnosticEngine &diag) {
  const EstimatorSpec &spec = *s.cfg.objective.compiled;
  EstimatorSetup &e = s.est;
  const Manifest &m = e.objective->bundle().manifest();
  auto domainOf = [&](const std::string &name) {
    for (const BufferSpec &b : m.buffers)
      if (b.role == BufferRole::Input && b.name == name)
        return b.domain;
    return Domain::Token;
  };
  bool ok = true;
  for (const std::string &in : e.objective->bundle().inputNames()) {
    if (in == "logp_new")
      continue;
    if (!objectiveMayRead(in)) {
      diag.error(spec.loc, "the objective reads '" + in +
                               "'; cac-run gives objectives " +
                               objectiveInputList());
      ok = false;
    } else if (in == "logp_ref") {
      s.models.needReference = true;
    } else if (in == "weight" && !e.hasWeight) {
      diag.error(spec.loc, "the objective reads 'weight', which estimator '" +
                               e.bundle->manifest().estimator +
                               "' does not output");
      ok = false;
    } else if (in == "value") {
      // The critic's rollout-time value: V(S_t) per token from a token
      // critic, the success probability per sequence from SPPO's prompt
      // critic.
      Domain want = e.promptCritic ? Domain::Seq : Domain::Token;
      if (s.cfg.critic.kind == CriticSpec::Kind::None || domainOf(in) != want) {
        diag.error(spec.loc,
                   s.cfg.critic.kind == CriticSpec::Kind::None
                       ? std::string("the objective reads 'value': set a "
                                     "critic (critic = value_head(...))")
                       : "the objective reads 'value : " +
                             std::string(domainName(domainOf(in))) +
                             "', but the critic gives 'value : " +
                             domainName(want) + "'");
        ok = false;
      }
    }
    e.objectiveInputs.push_back(in);
  }
  return ok;
}

} // namespace

bool loadObjective(TrainerState &s, DiagnosticEngine &diag) {
  const TrainConfig &cfg = s.cfg;
  const EstimatorSpec &spec = *cfg.objective.compiled;
  EstimatorSetup &e = s.est;
  // A bundle compiled elsewhere (a GPU machine without the compiler).
  fs::path target = spec.path;
  if (spec.kind == EstimatorSpec::Kind::Bundle &&
      !fs::is_directory(spec.path)) {
    diag.error(spec.loc, "the objective bundle '" + spec.path.string() +
                             "' does not exist");
    return false;
  }
  if (spec.kind == EstimatorSpec::Kind::Source) {
    if (s.opts.compiler.empty()) {
      diag.error(spec.loc, "no `cac` compiler to compile '" +
                               spec.path.string() +
                               "': put cac-run next to `cac` (or set "
                               "CAC_COMPILER), or give a bundle compiled "
                               "elsewhere: objective = bundle(\"DIR\")");
      return false;
    }
    if (!fs::is_regular_file(spec.path)) {
      diag.error(spec.loc,
                 "the objective '" + spec.path.string() + "' does not exist");
      return false;
    }
    fs::path bundles = cfg.out / "bundles";
    fs::create_directories(bundles);
    target = bundles / ("objective-" + spec.path.stem().string());
    if (!compileBundle(s, diag, spec.loc, spec.path, target.string() + ".ptx",
                       target))
      return false;
  }
  try {
    e.objective.emplace(Bundle::load(target.string()));
  } catch (const std::exception &ex) {
    diag.error(spec.loc, std::string("cannot use the objective: ") + ex.what());
    return false;
  }
  bool ok = true;
  if (s.device().is_cuda() && !e.objective->bundle().bundle().hasCuda()) {
    diag.error(spec.loc, "the objective's bundle '" + target.string() +
                             "' has no kernels.ptx, so it cannot run on " +
                             s.device().str());
    ok = false;
  }
  if (e.objective->wrt() != "logp_new") {
    diag.error(spec.loc, "the objective '" + spec.path.stem().string() +
                             "' must be differentiated by logp_new (it is "
                             "differentiated by '" +
                             e.objective->wrt() + "')");
    ok = false;
  }
  if (!checkObjectiveInputs(s, diag))
    ok = false;
  const Manifest &m = e.objective->bundle().manifest();
  // Group statistics inside the objective (stdlib/gspo.cac: GRPO's
  // advantage) must be the step's: the minibatches hold whole groups.
  if (m.needsGroups) {
    e.groupMinibatches = true;
    if (cfg.minibatches > cfg.prompts) {
      diag.error(cfg.locOf("minibatches"),
                 "the objective computes over groups, so each minibatch "
                 "holds whole groups: minibatches (" +
                     std::to_string(cfg.minibatches) +
                     ") exceeds the groups per step (prompts = " +
                     std::to_string(cfg.prompts) + ")");
      ok = false;
    }
  }
  for (const auto &p : spec.params) {
    if (m.findParam(p.name) < 0) {
      diag.error(p.loc, "objective '" + m.estimator + "' has no parameter '" +
                            p.name + "'");
      ok = false;
    }
    e.objectiveParams[p.name] = p.value;
  }
  // The training file's aggregation, and Dr. GRPO's length: max_tokens
  // (a token loss's parameters; a seq loss averages over the sequences).
  if (m.findParam("aggregation") >= 0)
    e.objectiveParams["aggregation"] = static_cast<double>(cfg.aggregation);
  if (m.findParam("norm_len") >= 0)
    e.objectiveParams["norm_len"] = static_cast<double>(cfg.rollout.maxTokens);
  return ok;
}

} // namespace cac::rt::train
