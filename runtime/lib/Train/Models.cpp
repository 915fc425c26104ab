//===- Models.cpp - The policy, reference, critic and optimizer -----------===//

#include "Phases.h"

#include "cac/Runtime/Model/Architectures.h"
#include "cac/Runtime/Model/Config.h"
#include "cac/Runtime/Model/ModelIO.h"
#include "cac/Runtime/Train/MemoryCheck.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/utils/clip_grad.h>

#include <cmath>
#include <limits>

namespace cac::rt::train {

namespace {

/// The task tokenizer's BOS, EOS and padding ids into \p c.
void setSpecialIds(ModelConfig &c, const Tokenizer &tokenizer) {
  c.bosTokenId = tokenizer.bosId();
  c.eosTokenIds.clear();
  if (tokenizer.eosId())
    c.eosTokenIds = {*tokenizer.eosId()};
  c.padTokenId = tokenizer.padId();
}

ModelConfig builtinConfig(const Tokenizer &tokenizer, const ModelSpec &m) {
  ModelConfig c;
  c.modelType = "llama";
  c.vocabSize = tokenizer.vocabSize();
  c.hiddenSize = m.hidden;
  c.intermediateSize = m.ffn;
  c.numHiddenLayers = m.layers;
  c.numAttentionHeads = m.heads;
  c.numKeyValueHeads = m.kvHeads;
  c.maxPositionEmbeddings = m.maxPositions;
  c.rmsNormEps = 1e-5;
  c.tieWordEmbeddings = true;
  setSpecialIds(c, tokenizer);
  c.validate("builtin model");
  return c;
}

/// A public architecture (random("ARCH", ...)) with the task tokenizer's
/// special ids; the tokenizer's ids must fit its embedding.
ModelConfig randomConfig(const Tokenizer &tokenizer, const ModelSpec &m) {
  std::optional<ModelConfig> arch = publicArchitecture(m.arch);
  std::string what = "random(\"" + m.arch + "\")";
  if (!arch)
    throw std::runtime_error(what + ": unknown architecture");
  ModelConfig c = *arch;
  if (m.layers > 0)
    c.numHiddenLayers = m.layers;
  if (m.maxPositions > 0)
    c.maxPositionEmbeddings = m.maxPositions;
  if (tokenizer.vocabSize() > c.vocabSize)
    throw std::runtime_error(
        what + ": the task's tokenizer has " +
        std::to_string(tokenizer.vocabSize()) + " ids, more than the " +
        std::to_string(c.vocabSize) + " rows of the architecture's embedding");
  setSpecialIds(c, tokenizer);
  c.validate(what);
  return c;
}

/// A fresh copy of \p m's architecture on \p device (weights are loaded
/// later).
TransformerLM cloneArchitecture(const TransformerLM &m, at::Device device) {
  TransformerLM c(m->config(), m->hasValueHead());
  c->to(device);
  return c;
}

void copyWeights(TransformerLM &to, const TransformerLM &from) {
  torch::NoGradGuard ng;
  auto src = from->named_parameters();
  for (auto &p : to->named_parameters())
    p.value().copy_(src[p.key()]);
}

std::vector<at::Tensor> trainableParameters(const ModelSet &m) {
  std::vector<at::Tensor> ps = m.policy->parameters();
  if (m.rlOptimizer && m.critic)
    for (auto &p : m.critic->parameters())
      ps.push_back(p);
  return ps;
}

} // namespace

TransformerLM makeModel(const TaskSource &task, const ModelSpec &m,
                        bool valueHead, at::Device device) {
  if (m.kind == ModelSpec::Kind::Builtin)
    return TransformerLM(builtinConfig(*task.tokenizer, m), valueHead);
  if (m.kind == ModelSpec::Kind::Random) {
    TransformerLM model(randomConfig(*task.tokenizer, m), valueHead);
    if (m.seed) {
      // The weights from their own seed, so that a model's weights do not
      // depend on what else the run draws first.
      at::Generator g = at::detail::createCPUGenerator(uint64_t(*m.seed));
      model->initWeights(0.02, g);
    }
    return model;
  }
  LoadOptions lo;
  lo.valueHead = valueHead ? ValueHeadMode::With : ValueHeadMode::Without;
  lo.device = device;
  lo.availableMemory = availableMemory;
  return loadPretrained(m.path, lo);
}

void setUpdateOptions(TransformerLM &model, const TrainConfig &cfg) {
  at::ScalarType dtype = parseModelDtype(cfg.updateDtype);
  model->setComputeDtype(dtype == model->dtype() ? at::ScalarType::Undefined
                                                 : dtype);
  model->setActivationCheckpointing(cfg.activationCheckpointing);
}

ModelConfig modelConfig(const TaskSource &task, const ModelSpec &m) {
  if (m.kind == ModelSpec::Kind::Builtin)
    return builtinConfig(*task.tokenizer, m);
  if (m.kind == ModelSpec::Kind::Random)
    return randomConfig(*task.tokenizer, m);
  return ModelConfig::fromFile(m.path / "config.json");
}

void buildOptimizer(TrainerState &s, bool rl) {
  const auto &o = s.cfg.optimizer;
  ModelSet &m = s.models;
  auto options = [&](double lr) {
    return torch::optim::AdamWOptions(lr)
        .betas(std::make_tuple(o.beta1, o.beta2))
        .eps(o.eps)
        .weight_decay(o.weightDecay);
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  m.baseLr.clear();
  double lr = rl ? o.lr : s.cfg.sft.lr;
  groups.emplace_back(
      m.policy->parameters(),
      std::make_unique<torch::optim::AdamWOptions>(options(lr)));
  m.baseLr.push_back(lr);
  if (rl && m.critic) {
    double clr = s.cfg.critic.lr > 0 ? s.cfg.critic.lr : o.lr;
    groups.emplace_back(
        m.critic->parameters(),
        std::make_unique<torch::optim::AdamWOptions>(options(clr)));
    m.baseLr.push_back(clr);
  }
  m.optimizer = std::make_unique<torch::optim::AdamW>(groups, options(lr));
  m.rlOptimizer = rl;
}

double setLr(TrainerState &s, double factor) {
  ModelSet &m = s.models;
  auto &groups = m.optimizer->param_groups();
  for (size_t g = 0; g < groups.size(); ++g)
    static_cast<torch::optim::AdamWOptions &>(groups[g].options())
        .lr(m.baseLr[g] * factor);
  return m.baseLr[0] * factor;
}

double optimizerStep(TrainerState &s) {
  auto ps = trainableParameters(s.models);
  // Each rank's loss carries its share of the global normaliser, so the
  // sum of the ranks' gradients is the one-process gradient.
  s.world.sumGradients(ps);
  double norm = 0;
  if (s.cfg.optimizer.gradClip > 0) {
    norm = torch::nn::utils::clip_grad_norm_(ps, s.cfg.optimizer.gradClip);
  } else {
    double sq = 0;
    for (auto &p : ps)
      if (p.grad().defined())
        sq += p.grad().pow(2).sum().item<double>();
    norm = std::sqrt(sq);
  }
  // The norm is of the world's summed gradient: every rank decides alike.
  if (skipNonFinite(s, "gradient norm", !std::isfinite(norm),
                    "a non-finite loss, or a gradient too large for float")) {
    s.models.optimizer->zero_grad();
    return std::numeric_limits<double>::quiet_NaN();
  }
  s.models.optimizer->step();
  s.models.optimizer->zero_grad();
  return norm;
}

void enterRl(TrainerState &s) {
  ModelSet &m = s.models;
  if (m.needReference) {
    m.reference = cloneArchitecture(m.policy, s.device());
    copyWeights(m.reference, m.policy);
    // The reference's log-probabilities computed as the policy's are.
    setUpdateOptions(m.reference, s.cfg);
    m.reference->eval();
    for (auto &p : m.reference->parameters())
      p.set_requires_grad(false);
  }
  buildOptimizer(s, true);
}

TransformerLM &rolloutPolicy(TrainerState &s) {
  ModelSet &m = s.models;
  at::ScalarType dtype = parseModelDtype(s.cfg.rolloutDtype);
  if (dtype == m.policy->dtype())
    return m.policy;
  // Every in-place change of a parameter (the optimizer's step, a
  // checkpoint's load) bumps its version counter.
  int64_t version = 0;
  for (const auto &p : m.policy->parameters())
    version += static_cast<int64_t>(p._version());
  if (!m.rollout) {
    // Allocated in its dtype on the device, uninitialized (the weights are
    // copied below): nothing is drawn from LibTorch's default generator, so
    // the run's random stream does not depend on when the copy is made (a
    // --resume makes it later).
    m.rollout = TransformerLM(m.policy->config(), m.policy->hasValueHead(),
                              at::TensorOptions().dtype(dtype).device(
                                  s.device()));
    m.rollout->eval();
    for (auto &p : m.rollout->parameters())
      p.set_requires_grad(false);
    m.rolloutVersion = -1;
  }
  if (version != m.rolloutVersion) {
    copyWeights(m.rollout, m.policy); // rounds float32 to the copy's dtype
    m.rolloutVersion = version;
  }
  return m.rollout;
}

at::Tensor values(TransformerLM &model, const Padded &pd) {
  at::Tensor h = model->forwardHidden(pd.ids, pd.mask);
  return gatherResponse(model->valueHead(h), pd);
}

} // namespace cac::rt::train
