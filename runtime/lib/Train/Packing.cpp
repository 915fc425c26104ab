//===- Packing.cpp - Rollouts as padded and packed tensors ----------------===//

#include "Phases.h"

#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>

namespace cac::rt::train {

double seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

std::string fmt(const char *f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

void TrainerState::syncForTiming() const {
  if (device().is_cuda())
    torch::cuda::synchronize(device().has_index() ? device().index() : -1);
}

Padded padRollouts(const std::vector<const Rollout *> &rows, int64_t padId,
                   at::Device device) {
  int64_t b = static_cast<int64_t>(rows.size());
  int64_t L = 2, Tmax = 1;
  for (const Rollout *r : rows) {
    L = std::max<int64_t>(L, r->prompt.size() + r->response.size());
    Tmax = std::max<int64_t>(Tmax, r->response.size());
  }
  std::vector<int64_t> ids(b * L, padId), pos(b * Tmax, 0), seq;
  std::vector<uint8_t> mask(b * L, 0), resp(b * Tmax, 0);
  for (int64_t i = 0; i < b; ++i) {
    const Rollout &r = *rows[i];
    int64_t P = r.prompt.size(), T = r.response.size();
    for (int64_t j = 0; j < P; ++j)
      ids[i * L + j] = r.prompt[j], mask[i * L + j] = 1;
    for (int64_t t = 0; t < T; ++t) {
      ids[i * L + P + t] = r.response[t], mask[i * L + P + t] = 1;
      pos[i * Tmax + t] = P + t - 1;
      // The packed arrays hold the actions only: an observation token is
      // context for the model but no token of the estimator or the loss
      // (docs/language.md, "Observation tokens").
      if (r.isObs(static_cast<size_t>(t)))
        continue;
      resp[i * Tmax + t] = 1;
      seq.push_back(i);
    }
  }
  Padded p;
  p.ids = at::tensor(ids, at::kLong).view({b, L}).to(device);
  p.mask = at::tensor(mask, at::kByte).view({b, L}).to(device, at::kBool);
  p.pos = at::tensor(pos, at::kLong).view({b, Tmax}).to(device);
  p.resp = at::tensor(resp, at::kByte).view({b, Tmax}).to(device, at::kBool);
  p.tokenSeq = at::tensor(seq, at::kLong).to(device);
  p.numTokens = static_cast<int64_t>(seq.size());
  return p;
}

at::Tensor gatherResponse(const at::Tensor &perPos, const Padded &p) {
  return perPos.gather(1, p.pos).masked_select(p.resp);
}

at::Tensor responseLogProbs(TransformerLM &model, const at::Tensor &hidden,
                            const Padded &p, double temperature) {
  int64_t b = p.ids.size(0), L = p.ids.size(1);
  // p.pos indexes the [b, L-1] outputs: the hidden state at row i, position
  // pos predicts the token at pos + 1.
  at::Tensor rowStart = at::arange(b, p.pos.options()).mul_(L).unsqueeze(1);
  at::Tensor where = (rowStart + p.pos).masked_select(p.resp);
  at::Tensor h =
      hidden.reshape({b * L, hidden.size(-1)}).index_select(0, where);
  at::Tensor next = p.ids.reshape({b * L}).index_select(0, where + 1);
  return model->headLogProbs(h, next, temperature);
}

at::Tensor packActions(const std::vector<Rollout> &rows,
                       std::vector<float> Rollout::*field, at::Device device) {
  std::vector<float> all;
  for (const Rollout &r : rows) {
    const std::vector<float> &v = r.*field;
    for (size_t t = 0; t < v.size(); ++t)
      if (!r.isObs(t))
        all.push_back(v[t]);
  }
  return at::tensor(all, at::kFloat).to(device);
}

at::Tensor turnStarts(const std::vector<Rollout> &rows, at::Device device) {
  std::vector<float> all;
  for (const Rollout &r : rows) {
    bool start = true;
    for (size_t t = 0; t < r.response.size(); ++t) {
      if (r.isObs(t)) {
        start = true;
        continue;
      }
      all.push_back(start ? 1.0f : 0.0f);
      start = false;
    }
  }
  return at::tensor(all, at::kFloat).to(device);
}

std::vector<float> hostFloats(const at::Tensor &t) {
  at::Tensor c = t.to(at::kCPU, at::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(),
                            c.data_ptr<float>() + c.numel());
}

} // namespace cac::rt::train
