//===- TrainFileValues.cpp - The schema of each field's value -------------===//
//
// The calls each field of a training file takes (model = builtin(..),
// rollout = tree(..), ...): their arguments, types, ranges and defaults.
//
//===----------------------------------------------------------------------===//

#include "TrainFileChecker.h"

#include "cac/Runtime/Model/Architectures.h"

namespace cac::rt::train::schema {

namespace {

/// random("ARCH", layers = N, seed = S, max_positions = P,
/// tokenizer = "FOLDER").
bool parseRandomModel(Checker &c, const Value &v, ModelSpec &m) {
  Args a(c, v, {"arch", "layers", "seed", "max_positions", "tokenizer"},
         {"arch"});
  if (!a.require("arch"))
    return false;
  a.str("arch", m.arch);
  std::optional<ModelConfig> arch = publicArchitecture(m.arch);
  if (!arch) {
    c.diag().error(a.get("arch")->loc,
                   "unknown architecture '" + m.arch + "' (architectures: " +
                       joinNames(publicArchitectureNames()) + ")");
    return false;
  }
  m.layers = 0, m.maxPositions = 0;
  a.integer("layers", m.layers, 1, arch->numHiddenLayers);
  a.integer("max_positions", m.maxPositions, 16, arch->maxPositionEmbeddings);
  if (a.get("seed")) {
    int64_t seed = 0;
    a.integer("seed", seed, 0, int64_t(1) << 53);
    m.seed = seed;
  }
  a.path("tokenizer", m.tokenizerPath);
  m.kind = ModelSpec::Kind::Random;
  return a.ok();
}

} // namespace

bool parseModel(Checker &c, const Value &v, ModelSpec &m,
                const std::string &what) {
  m.loc = v.loc;
  if (isCall(v, "builtin")) {
    Args a(c, v,
           {"size", "hidden", "layers", "heads", "kv_heads", "ffn",
            "max_positions"},
           {"size"});
    a.str("size", m.size);
    if (m.size == "tiny") {
      m.hidden = 64, m.layers = 2, m.heads = 4, m.kvHeads = 2, m.ffn = 192;
    } else if (m.size == "small") {
      // ModelConfig::builtinSmall.
      m.hidden = 128, m.layers = 4, m.heads = 4, m.kvHeads = 2, m.ffn = 384;
    } else if (m.size != "custom") {
      c.diag().error(a.get("size")->loc, "unknown builtin model size '" +
                                             m.size +
                                             "' (sizes: tiny, small, custom)");
      return false;
    }
    a.integer("hidden", m.hidden, 8, 8192);
    a.integer("layers", m.layers, 1, 256);
    a.integer("heads", m.heads, 1, 256);
    a.integer("kv_heads", m.kvHeads, 1, 256);
    a.integer("ffn", m.ffn, 1, 65536);
    a.integer("max_positions", m.maxPositions, 16, 1 << 20);
    if (!a.ok())
      return false;
    if (m.hidden % m.heads != 0 || (m.hidden / m.heads) % 2 != 0) {
      c.diag().error(v.loc, "builtin model: hidden (" +
                                std::to_string(m.hidden) +
                                ") must be an even multiple of heads (" +
                                std::to_string(m.heads) + ")");
      return false;
    }
    if (m.heads % m.kvHeads != 0) {
      c.diag().error(v.loc, "builtin model: heads (" + std::to_string(m.heads) +
                                ") must be a multiple of kv_heads (" +
                                std::to_string(m.kvHeads) + ")");
      return false;
    }
    m.kind = ModelSpec::Kind::Builtin;
    return true;
  }
  if (isCall(v, "random"))
    return parseRandomModel(c, v, m);
  if (isCall(v, "hf")) {
    Args a(c, v, {"path"}, {"path"});
    if (!a.require("path"))
      return false;
    a.path("path", m.path);
    m.kind = ModelSpec::Kind::HuggingFace;
    return a.ok();
  }
  c.expected(v, what,
             "builtin(\"tiny\"|\"small\", ...), random(\"ARCH\", ...) or "
             "hf(\"FOLDER\")");
  return false;
}

bool parseReward(Checker &c, const Value &v, RewardSpec &r) {
  r.loc = v.loc;
  if (isCall(v, "command")) {
    Args a(c, v, {"cmd", "timeout"}, {"cmd"});
    if (!a.require("cmd"))
      return false;
    a.str("cmd", r.command);
    a.num("timeout", r.timeout, 0.0, 86400.0, true);
    if (a.ok() &&
        r.command.find_first_not_of(" \t\n") == std::string::npos) {
      c.diag().error(a.get("cmd")->loc,
                     "the reward command is empty: give the program and its "
                     "arguments, e.g. command(\"python3 score.py\")");
      return false;
    }
    r.kind = RewardSpec::Kind::Command;
    return a.ok();
  }
  c.expected(v, "'reward'",
             "command(\"PROGRAM ARGS\", timeout = 60)");
  return false;
}

bool parseTask(Checker &c, const Value &v, TaskSpec &t) {
  t.loc = v.loc;
  if (isCall(v, "arith")) {
    Args a(c, v,
           {"min_level", "max_level", "digits", "ops", "steps", "lines",
            "eval_fraction"});
    a.integer("min_level", t.minLevel, 1, 5);
    a.integer("max_level", t.maxLevel, 1, 5);
    a.integer("digits", t.digits, 1, 9);
    a.str("ops", t.ops);
    a.num("steps", t.steps, 0.0, 1.0);
    a.num("eval_fraction", t.evalFraction, 0.0, 0.9, true);
    int64_t lines = 0;
    a.integer("lines", lines, 0, 1);
    t.lines = lines != 0;
    if (t.lines && a.get("digits") && !(t.steps > 0.0)) {
      c.diag().error(a.get("lines")->loc,
                     "'lines' of 'arith' breaks stepped solutions into lines: "
                     "with 'digits' it needs 'steps' > 0 (every solution is "
                     "a bare answer otherwise)");
      return false;
    }
    if (a.get("ops") && (t.ops.empty() ||
                         t.ops.find_first_not_of("+-*") != std::string::npos)) {
      c.diag().error(a.get("ops")->loc, "'ops' of 'arith' must be a non-empty "
                                        "subset of \"+-*\", got \"" +
                                            t.ops + "\"");
      return false;
    }
    if (a.get("ops") && !a.get("digits")) {
      c.diag().error(a.get("ops")->loc,
                     "'ops' of 'arith' needs 'digits' (the levels fix "
                     "their own operators)");
      return false;
    }
    if (a.get("steps") && !a.get("digits")) {
      c.diag().error(a.get("steps")->loc,
                     "'steps' of 'arith' needs 'digits' (the levels write "
                     "their own solutions)");
      return false;
    }
    if (a.get("digits") && (a.get("min_level") || a.get("max_level"))) {
      c.diag().error(a.get("digits")->loc,
                     "'digits' and 'min_level'/'max_level' of 'arith' "
                     "exclude each other");
      return false;
    }
    if (a.ok() && t.minLevel > t.maxLevel) {
      c.diag().error(v.loc, "arith: min_level (" + std::to_string(t.minLevel) +
                                ") exceeds max_level (" +
                                std::to_string(t.maxLevel) + ")");
      return false;
    }
    t.kind = TaskSpec::Kind::Arith;
    return a.ok();
  }
  if (isCall(v, "gsm8k")) {
    Args a(c, v, {"train", "eval"}, {"train"});
    if (!a.require("train") || !a.require("eval"))
      return false;
    a.path("train", t.trainPath);
    a.path("eval", t.evalPath);
    t.kind = TaskSpec::Kind::Gsm8k;
    return a.ok();
  }
  if (isCall(v, "jsonl")) {
    Args a(c, v, {"train", "eval", "prompt", "answer", "solution"}, {"train"});
    if (!a.require("train") || !a.require("eval"))
      return false;
    a.path("train", t.trainPath);
    a.path("eval", t.evalPath);
    for (auto [name, key] : {std::pair{"prompt", &t.keys.prompt},
                             std::pair{"answer", &t.keys.answer},
                             std::pair{"solution", &t.keys.solution}}) {
      a.str(name, *key);
      if (a.get(name) && key->empty()) {
        c.diag().error(a.get(name)->loc,
                       std::string("'") + name +
                           "' of 'jsonl' names a field: it must not be empty");
        return false;
      }
    }
    t.kind = TaskSpec::Kind::Jsonl;
    return a.ok();
  }
  c.expected(v, "'task'",
             "arith(min_level = .., max_level = ..), arith(digits = .., "
             "ops = \"+-\"), "
             "gsm8k(\"train.jsonl\", eval = \"test.jsonl\") or "
             "jsonl(\"train.jsonl\", eval = \"eval.jsonl\")");
  return false;
}

bool parseEstimator(Checker &c, const Value &v, EstimatorSpec &e) {
  e.loc = v.loc;
  if (v.kind == Value::Kind::String) {
    auto p = c.path(v, "'estimator'");
    if (!p)
      return false;
    e.path = *p;
    e.kind = p->extension() == ".cac" ? EstimatorSpec::Kind::Source
                                      : EstimatorSpec::Kind::Bundle;
    return true;
  }
  if (isCall(v, "cac") || isCall(v, "bundle")) {
    Args a(c, v, {"path"}, {"path"}, /*allowUnknown=*/true);
    if (!a.require("path"))
      return false;
    a.path("path", e.path);
    e.kind = v.text == "cac" ? EstimatorSpec::Kind::Source
                             : EstimatorSpec::Kind::Bundle;
    bool ok = a.ok();
    for (const auto &x : a.extra()) {
      auto n = c.number(*x.value, "estimator parameter '" + x.key + "'", -1e300,
                        1e300);
      if (!n) {
        ok = false;
        continue;
      }
      e.params.push_back({x.key, *n, x.loc});
    }
    return ok;
  }
  c.expected(v, "'estimator'",
             "a path to a .cac file or a bundle folder, "
             "cac(\"FILE.cac\", param = value, ...) or "
             "bundle(\"DIR\", param = value, ...)");
  return false;
}

bool parseCritic(Checker &c, const Value &v, CriticSpec &cr) {
  cr.loc = v.loc;
  if (c.isNone(v)) {
    cr.kind = CriticSpec::Kind::None;
    return true;
  }
  if (isCall(v, "value_head") || isCall(v, "value_model")) {
    bool separate = v.text == "value_model";
    std::vector<std::string> known = {"coef", "clip"};
    if (separate)
      known.insert(known.begin(), {"model", "lr"});
    Args a(c, v, known,
           separate ? std::vector<std::string>{"model"}
                    : std::vector<std::string>{});
    a.num("coef", cr.coef, 0.0, 1e6);
    a.num("clip", cr.clip, 0.0, 1e6);
    if (separate) {
      a.num("lr", cr.lr, 0.0, 10.0);
      if (!a.require("model"))
        return false;
      if (!parseModel(c, *a.get("model"), cr.model, a.what("model")))
        return false;
      cr.kind = CriticSpec::Kind::ValueModel;
    } else {
      cr.kind = CriticSpec::Kind::ValueHead;
    }
    return a.ok();
  }
  c.expected(v, "'critic'",
             "none, value_head(coef = .., clip = ..) or "
             "value_model(builtin(...), lr = .., coef = .., clip = ..)");
  return false;
}

bool parseRollout(Checker &c, const Value &v, RolloutSpec &r) {
  r.loc = v.loc;
  static const char *forms =
      "group(n = .., temperature = .., top_p = .., top_k = .., max_tokens = "
      "..), chain(n = .., samples = .., ...), tree(branches = \"4-2-2\", "
      "seg_len = .., ...) or forest(n = .., trees = .., tau = .., children = "
      ".., ...)";
  std::vector<std::string> common = {"temperature", "top_p", "top_k",
                                     "max_tokens"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), common.begin(), common.end());
    return extra;
  };
  std::vector<std::string> known;
  if (isCall(v, "group")) {
    r.kind = RolloutSpec::Kind::Group;
    known = with({"n"});
  } else if (isCall(v, "chain")) {
    r.kind = RolloutSpec::Kind::Chain;
    known = with({"n", "samples", "dedup"});
  } else if (isCall(v, "tree")) {
    r.kind = RolloutSpec::Kind::Tree;
    known = with({"branches", "seg_len", "replay_steps", "replay_take"});
  } else if (isCall(v, "forest")) {
    r.kind = RolloutSpec::Kind::Forest;
    known = with({"n", "trees", "children", "tau", "tau_step", "tau_min",
                  "delimiters", "distinct", "entropy_top_k"});
  } else {
    c.expected(v, "'rollout'", forms);
    return false;
  }
  Args a(c, v, known);
  a.integer("n", r.n, 1, 4096);
  a.num("temperature", r.temperature, 0.0, 100.0, true);
  a.num("top_p", r.topP, 0.0, 1.0, true);
  a.integer("top_k", r.topK, 0, 1 << 30);
  a.integer("max_tokens", r.maxTokens, 1, 1 << 20);
  a.integer("samples", r.samples, 1, 1024);
  int64_t dedup = r.dedup ? 1 : 0;
  a.integer("dedup", dedup, 0, 1);
  r.dedup = dedup != 0;
  a.integer("seg_len", r.segLen, 1, 1 << 20);
  a.integer("replay_steps", r.replaySteps, 0, 1 << 20);
  a.integer("replay_take", r.replayTake, 0, 1 << 20);
  a.integer("trees", r.trees, 1, 4096);
  a.integer("children", r.children, 2, 64);
  a.num("tau", r.tau, 0.0, 100.0);
  a.num("tau_step", r.tauStep, 0.0, 100.0);
  a.num("tau_min", r.tauMin, 0.0, 100.0);
  a.integer("entropy_top_k", r.entropyTopK, 0, 1 << 30);
  int64_t distinct = r.distinct ? 1 : 0;
  a.integer("distinct", distinct, 0, 1);
  r.distinct = distinct != 0;
  bool ok = a.ok();
  if (r.kind == RolloutSpec::Kind::Tree) {
    // Branch factors in the papers' notation: "6-6-6".
    std::string spec;
    if (!a.require("branches"))
      return false;
    a.str("branches", spec);
    if (!a.ok())
      return false;
    const Value &bv = *a.get("branches");
    r.branches.clear();
    std::string part;
    int64_t leaves = 1;
    auto flush = [&]() {
      if (part.empty() || part.size() > 4 ||
          part.find_first_not_of("0123456789") != std::string::npos ||
          std::stoll(part) < 1) {
        c.diag().error(bv.loc, "'branches' of 'tree' must be positive "
                               "integers separated by '-' (e.g. \"6-6-6\"), "
                               "got \"" + spec + "\"");
        return false;
      }
      r.branches.push_back(std::stoll(part));
      leaves *= r.branches.back();
      part.clear();
      return true;
    };
    for (char ch : spec) {
      if (ch == '-') {
        if (!flush())
          return false;
      } else {
        part += ch;
      }
    }
    if (!flush())
      return false;
    if (r.branches.size() > 16 || leaves > 4096) {
      c.diag().error(bv.loc, "'branches' of 'tree': at most 16 depths and "
                             "4096 leaves per prompt, got \"" + spec + "\"");
      return false;
    }
  }
  if (r.kind == RolloutSpec::Kind::Tree && r.replayTake > 0 &&
      r.replaySteps == 0) {
    c.diag().error(a.get("replay_take")->loc,
                   "'replay_take' of 'tree' caps what the replay buffer trains "
                   "per question: set 'replay_steps' (how many steps a node "
                   "sample may wait, e.g. 8) too");
    ok = false;
  }
  if (r.kind == RolloutSpec::Kind::Forest) {
    if (r.n % r.trees != 0) {
      const Value *tv = a.get("trees");
      c.diag().error(tv ? tv->loc : v.loc,
                     "'n' of 'forest' (" + std::to_string(r.n) +
                         " leaves per prompt) must be a multiple of 'trees' (" +
                         std::to_string(r.trees) + ")");
      ok = false;
    }
    std::string delims;
    a.str("delimiters", delims);
    // Several delimiters are separated by '|' ("." and "\n" are one each).
    r.delimiters.clear();
    size_t from = 0;
    while (!delims.empty() && from <= delims.size()) {
      size_t bar = delims.find('|', from);
      std::string d = delims.substr(
          from, bar == std::string::npos ? std::string::npos : bar - from);
      if (!d.empty())
        r.delimiters.push_back(d);
      if (bar == std::string::npos)
        break;
      from = bar + 1;
    }
    ok = ok && a.ok();
  }
  return ok;
}


bool parseObjective(Checker &c, const Value &v, ObjectiveSpec &o) {
  o.loc = v.loc;
  if (v.kind == Value::Kind::String || isCall(v, "cac") ||
      isCall(v, "bundle")) {
    EstimatorSpec e;
    if (!parseEstimator(c, v, e))
      return false;
    o.compiled = std::move(e);
    return true;
  }
  if (!isCall(v, "ppo_clip")) {
    c.expected(v, "'objective'",
               "ppo_clip(eps = .., eps_high = ..), a .cac objective file, "
               "cac(\"FILE.cac\", param = value, ...) or a bundle compiled "
               "from one, bundle(\"DIR\", param = value, ...)");
    return false;
  }
  Args a(c, v, {"eps", "eps_high"});
  a.num("eps", o.epsLow, 0.0, 1.0);
  o.epsHigh = o.epsLow;
  a.num("eps_high", o.epsHigh, 0.0, 100.0);
  return a.ok();
}

bool parseKl(Checker &c, const Value &v, KlSpec &k) {
  k.loc = v.loc;
  if (c.isNone(v)) {
    k.kind = KlSpec::Kind::None;
    return true;
  }
  if (isCall(v, "k1") || isCall(v, "k3")) {
    Args a(c, v, {"coef", "in_reward", "target", "horizon"}, {"coef"});
    if (!a.require("coef"))
      return false;
    a.num("coef", k.coef, 0.0, 1e6);
    int64_t inReward = 0;
    a.integer("in_reward", inReward, 0, 1);
    k.inReward = inReward != 0;
    a.num("target", k.target, 0.0, 1e6);
    a.num("horizon", k.horizon, 1.0, 1e12);
    if (k.target > 0 && !k.inReward) {
      c.diag().error(a.get("target")->loc,
                     "an adaptive KL coefficient ('target') adjusts the KL "
                     "penalty in the reward: set in_reward = 1");
      return false;
    }
    k.kind = v.text == "k1" ? KlSpec::Kind::K1 : KlSpec::Kind::K3;
    return a.ok();
  }
  c.expected(v, "'kl'",
             "none, k1(coef = .., in_reward = 0|1, target = .., horizon = "
             "..) or k3(coef = .., ...)");
  return false;
}

bool parseOptimizer(Checker &c, const Value &v, OptimizerSpec &o) {
  o.loc = v.loc;
  if (!isCall(v, "adamw")) {
    c.expected(v, "'optimizer'",
               "adamw(lr = .., beta1 = .., beta2 = .., eps = .., "
               "weight_decay = .., grad_clip = ..)");
    return false;
  }
  Args a(c, v, {"lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip"});
  a.num("lr", o.lr, 0.0, 10.0, true);
  a.num("beta1", o.beta1, 0.0, 1.0);
  a.num("beta2", o.beta2, 0.0, 1.0);
  a.num("eps", o.eps, 0.0, 1.0, true);
  a.num("weight_decay", o.weightDecay, 0.0, 10.0);
  a.num("grad_clip", o.gradClip, 0.0, 1e9);
  return a.ok();
}

bool parseSchedule(Checker &c, const Value &v, ScheduleSpec &s) {
  s.loc = v.loc;
  if (isCall(v, "constant") ||
      (v.kind == Value::Kind::Name && v.text == "constant")) {
    s.kind = ScheduleSpec::Kind::Constant;
    if (v.kind == Value::Kind::Name)
      return true;
    Args a(c, v, {"warmup"});
    a.integer("warmup", s.warmup, 0, 1LL << 40);
    return a.ok();
  }
  if (isCall(v, "cosine") ||
      (v.kind == Value::Kind::Name && v.text == "cosine")) {
    s.kind = ScheduleSpec::Kind::Cosine;
    if (v.kind == Value::Kind::Name)
      return true;
    Args a(c, v, {"warmup", "min_ratio"});
    a.integer("warmup", s.warmup, 0, 1LL << 40);
    a.num("min_ratio", s.minRatio, 0.0, 1.0);
    return a.ok();
  }
  c.expected(v, "'schedule'",
             "constant(warmup = ..) or cosine(warmup = .., min_ratio = ..)");
  return false;
}

bool parseSft(Checker &c, const Value &v, SftSpec &s) {
  s.loc = v.loc;
  if (c.isNone(v)) {
    s.steps = 0;
    return true;
  }
  if (!isCall(v, "sft")) {
    c.expected(v, "'warm_start'",
               "none or sft(steps = .., batch = .., lr = .., schedule = ..)");
    return false;
  }
  Args a(c, v, {"steps", "batch", "lr", "schedule"});
  a.integer("steps", s.steps, 0, 1LL << 40);
  a.integer("batch", s.batch, 1, 1 << 20);
  a.num("lr", s.lr, 0.0, 10.0, true);
  if (const Value *sv = a.get("schedule")) {
    ScheduleSpec sched;
    if (!parseSchedule(c, *sv, sched))
      return false;
    s.schedule = sched;
  }
  return a.ok();
}

bool parseEval(Checker &c, const Value &v, EvalSpec &e) {
  e.loc = v.loc;
  if (c.isNone(v)) {
    e.size = 0;
    return true;
  }
  if (!isCall(v, "greedy")) {
    c.expected(v, "'eval'",
               "none or greedy(every = .., size = .., samples = ..)");
    return false;
  }
  Args a(c, v, {"every", "size", "samples"});
  a.integer("every", e.every, 0, 1LL << 40);
  a.integer("size", e.size, 1, 1 << 24);
  a.integer("samples", e.samples, 0, 1 << 24);
  return a.ok();
}


} // namespace cac::rt::train::schema
