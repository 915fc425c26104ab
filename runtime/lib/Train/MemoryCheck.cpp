//===- MemoryCheck.cpp - Refusing what cannot fit in memory ---------------===//
//
// Training adds to a model's weights their gradients and AdamW's two
// moments (and a reference copy where the run reads logp_ref); a rollout
// step holds every row's KV cache at once and, per generated token, each
// row's logits over the vocabulary. Either would be allocated until the
// kernel (or the CUDA allocator) stops the process, minutes into the run;
// instead the run estimates them first and stops with the numbers and what
// to lower.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Train/MemoryCheck.h"

#include "Phases.h"

#include "CudaAllocatorCache.h"

#include "cac/Runtime/Kernels/CudaDriver.h"
#include "cac/Runtime/Model/ChunkedLogProbs.h"
#include "cac/Runtime/Support/HostMemory.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace cac::rt::train {

namespace {

/// Whether availableCudaMemory counts the caching allocator's cache.
constexpr bool kCudaCacheCounted =
#if CAC_HAVE_CUDA_ALLOCATOR_STATS
    true;
#else
    false;
#endif

/// The free memory of CUDA device \p ordinal: the driver's, plus what the
/// caching allocator holds unallocated where this LibTorch says; -1 where
/// the driver cannot say.
double availableCudaMemory(int ordinal) {
  const CudaDriver &drv = CudaDriver::get();
  if (!drv.available() || !drv.cuMemGetInfo || ordinal >= drv.deviceCount())
    return -1;
  try {
    ScopedContext ctx(drv.primaryContext(ordinal));
    size_t freeBytes = 0, totalBytes = 0;
    drv.check(drv.cuMemGetInfo(&freeBytes, &totalBytes), "cuMemGetInfo");
    return static_cast<double>(freeBytes) + cachedUnallocatedCuda(ordinal);
  } catch (const std::exception &) {
    return -1;
  }
}

/// Rows that generate at once for one prompt: a lower bound for plans that
/// grow (chains add Monte-Carlo continuations, forests branch).
int64_t rowsPerPrompt(const RolloutSpec &r) {
  if (r.kind == RolloutSpec::Kind::Tree) {
    int64_t leaves = 1;
    for (int64_t w : r.branches)
      leaves *= std::max<int64_t>(w, 1);
    return leaves;
  }
  return std::max<int64_t>(r.n, 1);
}

} // namespace

double availableMemory(const c10::Device &device) {
  if (device.is_cuda())
    return availableCudaMemory(device.has_index() ? device.index() : 0);
  if (!device.is_cpu())
    return -1;
  return availableHostMemory();
}

TrainingMemory estimateTrainingMemory(int64_t parameters, int64_t dtypeBytes,
                                      bool reference) {
  double weights = double(parameters) * double(dtypeBytes);
  TrainingMemory m;
  m.gradients = weights;
  m.moments = 2 * weights;
  m.reference = reference ? weights : 0;
  return m;
}

RolloutMemory estimateRolloutMemory(const ModelConfig &c, int64_t dtypeBytes,
                                    int64_t rows, int64_t tokensPerRow) {
  RolloutMemory m;
  double perToken = 2.0 * double(c.numHiddenLayers) *
                    double(c.numKeyValueHeads * c.headDimension()) *
                    double(dtypeBytes);
  m.kvCache = double(rows) * double(tokensPerRow) * perToken;
  // The step's logits, their softmax and log-softmax in float32.
  m.logits = 3.0 * 4.0 * double(rows) * double(c.vocabSize);
  return m;
}

ActivationMemory estimateActivationMemory(const ModelConfig &c,
                                          int64_t dtypeBytes, int64_t rows,
                                          int64_t tokens, bool logits,
                                          bool checkpointed) {
  const double d = double(dtypeBytes), B = double(rows), T = double(tokens);
  const double bt = B * T, H = double(c.hiddenSize);
  const double hd = double(c.headDimension());
  const double hq = double(c.numAttentionHeads) * hd;
  const double hkv = double(c.numKeyValueHeads) * hd;
  const double F = double(c.intermediateSize);
  // softmax(.., kFloat) keeps float32 probabilities whatever the dtype;
  // in another dtype the matmul keeps their copy in it too.
  const double scores = B * double(c.numAttentionHeads) * T * T;
  const double probs = 4 * scores + (d != 4 ? d * scores : 0);
  ActivationMemory m;
  // Per layer (Transformer.cpp): each RMSNorm keeps its input in float32
  // (the input itself in float32), its normalized input and its output
  // (2 x (4 + 2 d) H bytes; the residuals are these inputs); the attention
  // keeps the scaled queries and its output before o_proj (2 Hq), the keys
  // and values as the matmuls' contiguous copies (2 Hkv; RoPE's
  // intermediates are freed) and the probabilities; the MLP keeps gate,
  // silu(gate), up and their product (4 F).
  const double perLayer =
      bt * (2 * (4 + 2 * d) * H + d * (2 * hq + 2 * hkv + 4 * F)) + probs;
  // Checkpointed, each layer keeps its input; the backward pass holds one
  // layer's saved tensors again while it recomputes and differentiates it.
  m.layers = checkpointed ? double(c.numHiddenLayers) * d * bt * H + perLayer
                          : double(c.numHiddenLayers) * perLayer;
  // The scores and scores + bias before the softmax; backward, the
  // probabilities' gradient and the scores'.
  m.attention = 2 * 4 * scores;
  // One chunk's float32 logits and their log-softmax (headLogProbs
  // recomputes them a chunk of rows at a time, backward too): the update
  // never holds the logits of every row.
  double chunk = std::min(bt, double(logProbChunkRows(c.vocabSize)));
  m.logits = logits ? 2 * 4 * chunk * double(c.vocabSize) : 0;
  // The embeddings' output, the final norm's two tensors, RoPE's cos and sin
  // and the attention's mask bias (rows x tokens^2).
  m.other = d * (3 * bt * H + 2 * bt * hd + B * T * T);
  return m;
}

double weightCastMemory(const ModelConfig &c, int64_t dtypeBytes,
                        bool checkpointed) {
  if (dtypeBytes == kParameterBytes)
    return 0;
  const double d = double(dtypeBytes);
  const double head = double(c.vocabSize) * double(c.hiddenSize);
  const double layer =
      (c.numParameters() - head * (c.tieWordEmbeddings ? 1 : 2)) /
      std::max<double>(double(c.numHiddenLayers), 1);
  // The passes' casts of the weights to the compute dtype live as long as
  // the tensors their products keep: every layer's, or with checkpoints
  // the layer being recomputed's, and the LM head's throughout.
  return d * (checkpointed ? head + layer : c.numParameters());
}

void checkRolloutMemory(const TrainerState &s, int64_t rlIndex,
                        int64_t numPrompts, int64_t promptTokens) {
  // On a GPU, the driver's free memory without the allocator's cache would
  // refuse steps that fit.
  if (!(s.device().is_cpu() || (s.device().is_cuda() && kCudaCacheCounted)) ||
      numPrompts <= 0)
    return;
  double available = availableMemory(s.device());
  if (available <= 0)
    return;
  const RolloutSpec &r = s.cfg.rollout;
  int64_t rows = numPrompts * rowsPerPrompt(r);
  const ModelConfig &c = s.models.policy->config();
  // The sampling model's dtype: the policy's, or rollout_dtype's copy.
  int64_t dtypeBytes = static_cast<int64_t>(
      c10::elementSize(parseModelDtype(s.cfg.rolloutDtype)));
  RolloutMemory m =
      estimateRolloutMemory(c, dtypeBytes, rows, promptTokens + r.maxTokens);
  if (m.total() <= available)
    return;
  std::ostringstream msg;
  msg << "RL step " << rlIndex + 1 << ": the rollouts need at least about "
      << formatGiB(m.total()) << " on " << s.device().str() << " (" << rows
      << " rows = " << numPrompts << " prompts x " << rowsPerPrompt(r) << ", "
      << promptTokens << " prompt + " << r.maxTokens
      << " new tokens each: KV cache " << formatGiB(m.kvCache) << ", logits "
      << formatGiB(m.logits) << "), more than the " << formatGiB(available)
      << " of memory available; lower prompts, the rollouts per prompt or "
         "max_tokens";
  throw TrainError(msg.str());
}

namespace {

/// One model's share: "the policy's 1.54e+09 float32 parameters: weights
/// 5.74 GiB, gradients ..." and its bytes.
struct ModelNeed {
  std::string text;
  double bytes = 0;
};

ModelNeed modelNeed(const char *who, const ModelConfig &c, bool reference) {
  double params = c.numParameters();
  double weights = params * kParameterBytes;
  TrainingMemory t = estimateTrainingMemory(static_cast<int64_t>(params),
                                            kParameterBytes, reference);
  char count[32];
  std::snprintf(count, sizeof count, "%.3g", params);
  std::ostringstream msg;
  msg << who << " " << count << " float32 parameters (" << c.numHiddenLayers
      << " layers): weights " << formatGiB(weights) << ", gradients "
      << formatGiB(t.gradients) << ", AdamW's moments " << formatGiB(t.moments);
  if (reference)
    msg << ", the reference copy " << formatGiB(t.reference);
  return {msg.str(), weights + t.total()};
}

} // namespace

namespace {

/// The update's activations: a minibatch of the RL step's sequences
/// (prompts x rollouts per prompt over the minibatches, this process's
/// share), each of the longest prompt and max_tokens new tokens (at most
/// the policy's positions).
struct ActivationNeed {
  std::string text;
  double bytes = 0;
  int64_t rows = 0;
};

ActivationNeed activationNeed(const TrainerState &s, const ModelConfig &policy,
                              const ModelConfig *critic, int64_t promptTokens) {
  const TrainConfig &cfg = s.cfg;
  ActivationNeed need;
  if (cfg.steps <= 0)
    return need;
  int64_t sequences = cfg.prompts * rowsPerPrompt(cfg.rollout);
  int64_t share = std::max<int64_t>(cfg.minibatches, 1) *
                  std::max<int64_t>(s.world.size(), 1);
  need.rows = (sequences + share - 1) / share;
  int64_t tokens = std::min(promptTokens + cfg.rollout.maxTokens,
                            policy.maxPositionEmbeddings);
  const int64_t d =
      static_cast<int64_t>(c10::elementSize(parseModelDtype(cfg.updateDtype)));
  const bool ckpt = cfg.activationCheckpointing;
  need.bytes = estimateActivationMemory(policy, d, need.rows, tokens,
                                        /*logits=*/true, ckpt)
                   .total() +
               weightCastMemory(policy, d, ckpt);
  if (critic)
    need.bytes +=
        estimateActivationMemory(*critic, d, need.rows, tokens, false, ckpt)
            .total() +
        weightCastMemory(*critic, d, ckpt);
  std::ostringstream msg;
  msg << "the update's activations for a minibatch of " << need.rows
      << " sequences of " << tokens << " tokens (" << promptTokens
      << " prompt + " << cfg.rollout.maxTokens << " new";
  if (tokens < promptTokens + cfg.rollout.maxTokens)
    msg << ", cut to the policy's " << policy.maxPositionEmbeddings
        << " positions";
  if (d != kParameterBytes)
    msg << "; computed in " << cfg.updateDtype;
  if (ckpt)
    msg << "; checkpointed layers";
  msg << "): " << formatGiB(need.bytes);
  need.text = msg.str();
  return need;
}

} // namespace

void checkTrainingMemory(const TrainerState &s, const ModelConfig &policy,
                         const ModelConfig *critic, int64_t promptTokens) {
  c10::Device device = s.device();
  double available = availableMemory(device);
  if (available <= 0)
    return;
  std::vector<ModelNeed> needs{
      modelNeed("the policy's", policy, s.models.needReference)};
  at::ScalarType rollout = parseModelDtype(s.cfg.rolloutDtype);
  if (rollout != at::kFloat) {
    double bytes = static_cast<double>(policy.numParameters()) *
                   static_cast<double>(c10::elementSize(rollout));
    needs.front().text +=
        ", the " + s.cfg.rolloutDtype + " rollout copy " + formatGiB(bytes);
    needs.front().bytes += bytes;
  }
  if (critic)
    needs.push_back(modelNeed("the critic's", *critic, false));
  double models = 0;
  for (const ModelNeed &n : needs)
    models += n.bytes;
  ActivationNeed act = activationNeed(s, policy, critic, promptTokens);
  if (models + act.bytes <= available)
    return;
  std::ostringstream msg;
  msg << "training needs at least about " << formatGiB(models + act.bytes)
      << " on " << device.str() << " (" << needs.front().text;
  for (size_t i = 1; i < needs.size(); ++i)
    msg << "; " << needs[i].text;
  if (!act.text.empty())
    msg << "; " << act.text;
  msg << "), more than the " << formatGiB(available) << " available; ";
  const TrainConfig &cfg = s.cfg;
  if (act.bytes > models)
    msg << "use fewer sequences per minibatch (prompts " << cfg.prompts << " x "
        << rowsPerPrompt(cfg.rollout) << " rollouts / minibatches "
        << cfg.minibatches << ") or fewer new tokens (max_tokens)"
        << (cfg.activationCheckpointing ? ""
                                        : ", or activation_checkpointing = "
                                          "true");
  else
    msg << "use a smaller model (fewer layers) or a device with more memory";
  throw TrainError(msg.str());
}

} // namespace cac::rt::train
