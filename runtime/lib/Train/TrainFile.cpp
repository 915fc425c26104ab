//===- TrainFile.cpp - The schema of training files -----------------------===//
//
// The fields of a training file, their values' checks (TrainFileValues.cpp)
// and the cross-field checks; the syntax is TrainFileSyntax.cpp's.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Train/TrainFile.h"

#include "TrainFileChecker.h"

#include "cac/Runtime/Model/ModelDtype.h"

#include <fstream>
#include <functional>
#include <map>
#include <sstream>

namespace fs = std::filesystem;

namespace cac::rt::train {

using namespace schema;

const char *RolloutSpec::kindName() const {
  switch (kind) {
  case Kind::Group:
    return "group";
  case Kind::Chain:
    return "chain";
  case Kind::Tree:
    return "tree";
  case Kind::Forest:
    return "forest";
  }
  return "group";
}

const char *aggregationName(Aggregation a) {
  switch (a) {
  case Aggregation::TokenMean:
    return "token-mean";
  case Aggregation::SeqMeanTokenMean:
    return "seq-mean-token-mean";
  case Aggregation::SeqMeanTokenSum:
    return "seq-mean-token-sum";
  case Aggregation::SeqMeanTokenSumNorm:
    return "seq-mean-token-sum-norm";
  }
  return "?";
}

std::optional<Aggregation> parseAggregation(const std::string &s) {
  for (Aggregation a :
       {Aggregation::TokenMean, Aggregation::SeqMeanTokenMean,
        Aggregation::SeqMeanTokenSum, Aggregation::SeqMeanTokenSumNorm})
    if (s == aggregationName(a))
      return a;
  return std::nullopt;
}

SourceLoc TrainConfig::locOf(const std::string &field) const {
  for (const auto &[k, loc] : fieldLocs)
    if (k == field)
      return loc;
  return {};
}

namespace {

using Handler = std::function<bool(const Value &)>;

/// The fields of a training file: each one's name and the check that fills
/// its part of \p cfg (\p seed: the `seed` field).
std::vector<std::pair<std::string, Handler>> fieldTable(Checker &c,
                                                        DiagnosticEngine &diag,
                                                        TrainConfig &cfg,
                                                        int64_t &seed) {
  auto intField = [&](int64_t &out, const char *name, int64_t lo,
                      int64_t hi) -> Handler {
    return [&c, &out, name, lo, hi](const Value &v) {
      auto i = c.integer(v, std::string("'") + name + "'", lo, hi);
      if (i)
        out = *i;
      return i.has_value();
    };
  };
  auto boolField = [&](bool &out, const char *name) -> Handler {
    return [&c, &out, name](const Value &v) {
      auto b = c.boolean(v, std::string("'") + name + "'");
      if (b)
        out = *b;
      return b.has_value();
    };
  };
  // A model dtype's canonical name, or an error at the field. The handlers
  // outlive this function: they hold a copy of it.
  auto modelDtype = [&c,
                     &diag](const Value &v,
                            const char *name) -> std::optional<std::string> {
    auto s = c.string(v, std::string("'") + name + "'");
    if (!s)
      return std::nullopt;
    try {
      return canonicalModelDtype(*s);
    } catch (const std::exception &e) {
      diag.error(v.loc, std::string("'") + name + "': " + e.what());
      return std::nullopt;
    }
  };
  return {
      {"model",
       [&](const Value &v) { return parseModel(c, v, cfg.model, "'model'"); }},
      {"task", [&](const Value &v) { return parseTask(c, v, cfg.task); }},
      {"chat", [&](const Value &v) { return parseChat(c, v, cfg.chat); }},
      {"estimator",
       [&](const Value &v) { return parseEstimator(c, v, cfg.estimator); }},
      {"critic", [&](const Value &v) { return parseCritic(c, v, cfg.critic); }},
      {"rollout",
       [&](const Value &v) { return parseRollout(c, v, cfg.rollout); }},
      {"prompts", intField(cfg.prompts, "prompts", 1, 1 << 20)},
      {"objective",
       [&](const Value &v) { return parseObjective(c, v, cfg.objective); }},
      {"aggregation",
       [&](const Value &v) {
         auto s = c.string(v, "'aggregation'");
         if (!s)
           return false;
         auto a = parseAggregation(*s);
         if (!a) {
           diag.error(v.loc,
                      "unknown aggregation '" + *s +
                          "' (token-mean, seq-mean-token-mean, "
                          "seq-mean-token-sum, seq-mean-token-sum-norm)");
           return false;
         }
         cfg.aggregation = *a;
         return true;
       }},
      {"reward", [&](const Value &v) { return parseReward(c, v, cfg.reward); }},
      {"tools", [&](const Value &v) { return parseTools(c, v, cfg.tools); }},
      {"kl", [&](const Value &v) { return parseKl(c, v, cfg.kl); }},
      {"epochs", intField(cfg.epochs, "epochs", 1, 1 << 20)},
      {"minibatches", intField(cfg.minibatches, "minibatches", 1, 1 << 20)},
      {"whiten", boolField(cfg.whiten, "whiten")},
      {"optimizer",
       [&](const Value &v) { return parseOptimizer(c, v, cfg.optimizer); }},
      {"schedule",
       [&](const Value &v) { return parseSchedule(c, v, cfg.schedule); }},
      {"warm_start", [&](const Value &v) { return parseSft(c, v, cfg.sft); }},
      {"steps", intField(cfg.steps, "steps", 0, 1LL << 40)},
      {"eval", [&](const Value &v) { return parseEval(c, v, cfg.eval); }},
      {"checkpoint_every",
       intField(cfg.checkpointEvery, "checkpoint_every", 0, 1LL << 40)},
      {"seed", intField(seed, "seed", 0, (1LL << 53))},
      {"out",
       [&](const Value &v) {
         auto s = c.string(v, "'out'");
         if (s && s->empty()) {
           diag.error(v.loc, "'out' must not be empty");
           return false;
         }
         if (s)
           cfg.out = *s;
         return s.has_value();
       }},
      {"threads", intField(cfg.threads, "threads", 0, 1024)},
      {"rollout_dtype",
       [&, modelDtype](const Value &v) {
         auto name = modelDtype(v, "rollout_dtype");
         if (name)
           cfg.rolloutDtype = *name;
         return name.has_value();
       }},
      {"float32_matmul_precision",
       [&](const Value &v) {
         auto s = c.string(v, "'float32_matmul_precision'");
         if (s && *s != "highest" && *s != "high" && *s != "medium") {
           diag.error(v.loc, "'float32_matmul_precision': unknown precision '" +
                                 *s + "' (highest, high or medium)");
           return false;
         }
         if (s)
           cfg.float32MatmulPrecision = *s;
         return s.has_value();
       }},
      {"update_dtype",
       [&, modelDtype](const Value &v) {
         auto name = modelDtype(v, "update_dtype");
         if (!name)
           return false;
         if (*name == "float16") {
           // A float16 backward underflows without loss scaling, which
           // the update has not.
           diag.error(v.loc, "'update_dtype': float16 needs loss scaling, "
                             "which the update has not; use float32 or "
                             "bfloat16");
           return false;
         }
         cfg.updateDtype = *name;
         return true;
       }},
      {"activation_checkpointing",
       boolField(cfg.activationCheckpointing, "activation_checkpointing")},
  };
}

/// Checks between fields (after each field's own).
void checkAcrossFields(const TrainConfig &cfg, DiagnosticEngine &diag) {
  // Sequences per step: a tree has at least branches[0] leaves a prompt.
  int64_t perPrompt = cfg.rollout.kind == RolloutSpec::Kind::Tree &&
                              !cfg.rollout.branches.empty()
                          ? cfg.rollout.branches.front()
                          : cfg.rollout.n;
  int64_t batch = cfg.prompts * perPrompt;
  if (cfg.minibatches > batch)
    diag.error(cfg.locOf("minibatches"),
               "minibatches (" + std::to_string(cfg.minibatches) +
                   ") exceeds the sequences per step (prompts * n = " +
                   std::to_string(batch) + ")");
  if (cfg.chat.enabled && cfg.chat.folder.empty() && cfg.model.charTokenizer())
    diag.error(cfg.chat.loc,
               "the chat template comes from the model's tokenizer folder, "
               "but this model uses the built-in character tokenizer: give "
               "the folder, template(\"FOLDER\")");
  if (cfg.tools.enabled() && cfg.rollout.kind != RolloutSpec::Kind::Group)
    diag.error(cfg.tools.loc,
               std::string("tools need the group rollout plan (rollout = "
                           "group(..)); this file's plan is ") +
                   cfg.rollout.kindName());
  if (cfg.critic.kind == CriticSpec::Kind::ValueModel &&
      cfg.critic.model.charTokenizer() && !cfg.model.charTokenizer())
    diag.error(cfg.critic.loc,
               "a critic on the built-in character tokenizer needs a policy "
               "on it too (builtin, or random without a tokenizer folder)");
}

} // namespace

std::optional<TrainConfig> buildTrainConfig(const TrainBlock &block,
                                            const fs::path &file,
                                            DiagnosticEngine &diag) {
  TrainConfig cfg;
  cfg.name = block.name;
  cfg.file = file;
  fs::path base = file.parent_path();
  if (base.empty())
    base = ".";
  Checker c(diag, base);
  int64_t seed = 1;
  const std::vector<std::pair<std::string, Handler>> fields =
      fieldTable(c, diag, cfg, seed);
  std::vector<std::string> known;
  for (const auto &f : fields)
    known.push_back(f.first);

  std::map<std::string, SourceLoc> seen;
  for (const Field &f : block.fields) {
    auto it = std::find_if(fields.begin(), fields.end(),
                           [&](const auto &p) { return p.first == f.key; });
    if (it == fields.end()) {
      diag.error(f.keyLoc,
                 "unknown field '" + f.key + "'" + suggest(f.key, known));
      continue;
    }
    auto [prev, inserted] = seen.emplace(f.key, f.keyLoc);
    if (!inserted) {
      diag.error(f.keyLoc, "field '" + f.key + "' is set twice");
      diag.note(prev->second, "first set here");
      continue;
    }
    cfg.fieldLocs.emplace_back(f.key, f.keyLoc);
    it->second(f.value);
  }
  for (const char *required : {"model", "task", "estimator", "steps"})
    if (!seen.count(required))
      diag.error(block.loc, "training run '" + block.name +
                                "' is missing the required field '" + required +
                                "'");
  cfg.seed = static_cast<uint64_t>(seed);

  if (!diag.hasErrors())
    checkAcrossFields(cfg, diag);
  if (diag.hasErrors())
    return std::nullopt;
  return cfg;
}

std::optional<TrainConfig> loadTrainFile(const fs::path &file,
                                         std::string &errors) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    errors = file.string() + ": error: cannot read the training file\n";
    return std::nullopt;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  DiagnosticEngine diag(file.string(), ss.str());
  auto block = parseTrainFile(ss.str(), diag);
  std::optional<TrainConfig> cfg;
  if (block)
    cfg = buildTrainConfig(*block, file, diag);
  errors = diag.render();
  return cfg;
}

void applyOverrides(TrainConfig &config, const Overrides &o) {
  if (o.steps)
    config.steps = *o.steps;
  if (o.sftSteps)
    config.sft.steps = *o.sftSteps;
  if (o.evalEvery)
    config.eval.every = *o.evalEvery;
  if (o.seed)
    config.seed = static_cast<uint64_t>(*o.seed);
  if (o.threads)
    config.threads = *o.threads;
  if (o.out)
    config.out = *o.out;
}

} // namespace cac::rt::train
