//===- Generation.cpp - Batched sampling with a KV cache ------------------===//

#include "cac/Runtime/Model/Generation.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <vector>

namespace cac::rt {

const char *finishReasonName(FinishReason reason) {
  switch (reason) {
  case FinishReason::None:
    return "none";
  case FinishReason::Stop:
    return "stop";
  case FinishReason::Length:
    return "length";
  }
  return "?";
}

at::Generator makeGenerator(uint64_t seed) {
  return at::detail::createCPUGenerator(seed);
}

namespace {

/// Redraws the tokens of the rows that share a sibling group so that the
/// group's tokens are distinct: row k of a group draws with its uniform from
/// \p p (the filtered mass of each row, in \p order's sorted order when
/// defined) without the tokens of rows 0..k-1, while any mass is left.
void sampleSiblingsWithoutReplacement(const at::Tensor &p,
                                      const at::Tensor &order,
                                      const at::Tensor &u,
                                      const std::vector<int64_t> &siblings,
                                      at::Tensor &tokens) {
  const int64_t B = p.size(0), V = p.size(1);
  if (static_cast<int64_t>(siblings.size()) != B)
    throw std::runtime_error("sampleTokens: siblings must have one entry per "
                             "row");
  std::map<int64_t, std::vector<int64_t>> groups;
  for (int64_t r = 0; r < B; ++r)
    if (siblings[static_cast<size_t>(r)] >= 0)
      groups[siblings[static_cast<size_t>(r)]].push_back(r);
  bool any = false;
  for (const auto &g : groups)
    any = any || g.second.size() > 1;
  if (!any)
    return;
  at::Tensor pc = p.to(at::kCPU, at::kDouble).contiguous();
  at::Tensor oc =
      order.defined() ? order.to(at::kCPU, at::kLong).contiguous() : order;
  at::Tensor uc = u.to(at::kCPU, at::kFloat).contiguous();
  at::Tensor tc = tokens.to(at::kCPU, at::kLong).contiguous();
  auto tok = tc.accessor<int64_t, 1>();
  auto uu = uc.accessor<float, 2>();
  for (const auto &[group, rows] : groups) {
    std::vector<int64_t> taken{tok[rows[0]]};
    for (size_t k = 1; k < rows.size(); ++k) {
      int64_t r = rows[k];
      const double *pr = pc.data_ptr<double>() + r * V;
      const int64_t *orr = oc.defined() ? oc.data_ptr<int64_t>() + r * V
                                        : nullptr;
      auto tokenAt = [&](int64_t i) { return orr ? orr[i] : i; };
      auto isTaken = [&](int64_t i) {
        return std::find(taken.begin(), taken.end(), tokenAt(i)) !=
               taken.end();
      };
      double mass = 0;
      for (int64_t i = 0; i < V; ++i)
        if (pr[i] > 0 && !isTaken(i))
          mass += pr[i];
      if (mass > 0) { // inverse CDF over what is left
        double target = static_cast<double>(uu[r][0]) * mass, c = 0;
        int64_t pick = -1;
        for (int64_t i = 0; i < V; ++i) {
          if (pr[i] <= 0 || isTaken(i))
            continue;
          pick = i;
          c += pr[i];
          if (c > target)
            break;
        }
        tok[r] = tokenAt(pick);
      } // else every token with mass is taken: the row keeps its own draw
      taken.push_back(tok[r]);
    }
  }
  tokens = tc.to(tokens.device());
}

/// Candidates of the first nucleus search; most nuclei of a trained model's
/// next-token distributions hold fewer tokens.
constexpr int64_t kFirstCandidates = 1024;

/// Top-p of \p p [B, V] (probabilities): the most likely tokens in
/// descending order of probability with their mass zeroed from the first
/// token whose preceding mass reaches \p topP, as [B, N] probabilities and
/// token ids (a row resolved with fewer than N candidates is padded with
/// massless entries). Only the top tokens are ordered, row by row: every row
/// starts with kFirstCandidates; a row whose candidates do not end in a token
/// that is cut or massless (everything after it is then cut or massless too)
/// searches again with more, alone with the other open rows, so a peaked
/// distribution costs a top-k, not a sort of the vocabulary, whatever the
/// other rows of its batch need. The prefix sums are those of the full sort
/// (a sequential scan), so the kept mass and the draw match it token for
/// token; tokens of equal probability may come in another order.
std::pair<at::Tensor, at::Tensor> nucleus(const at::Tensor &p, double topP) {
  const int64_t B = p.size(0), V = p.size(1);
  struct Resolved {
    at::Tensor rows, probs, order; // rows undefined: every row of p
  };
  std::vector<Resolved> resolved;
  at::Tensor rows; // the open rows' indices in p; undefined: all of them
  for (int64_t n = std::min(V, kFirstCandidates);;) {
    if (n * 4 > V) // a selection that large costs about a sort
      n = V;
    at::Tensor sub = rows.defined() ? p.index_select(0, rows) : p;
    auto [sp, order] = n == V ? sub.sort(-1, /*descending=*/true)
                              : sub.topk(n, -1, /*largest=*/true,
                                         /*sorted=*/true);
    at::Tensor cdf = sp.cumsum(-1);
    at::Tensor cut = (cdf - sp) >= topP; // mass strictly before each
    sp = sp.masked_fill(cut, 0.0);
    at::Tensor last = sp.select(-1, n - 1);
    at::Tensor open = cut.select(-1, n - 1).logical_not() & (last > 0);
    if (n == V || !open.any().item<bool>()) {
      resolved.push_back({rows, sp, order});
      break;
    }
    at::Tensor closedIdx = open.logical_not().nonzero().squeeze(-1);
    at::Tensor openIdx = open.nonzero().squeeze(-1);
    auto pick = [&](const at::Tensor &t, const at::Tensor &idx) {
      return t.index_select(0, idx);
    };
    if (closedIdx.numel() > 0)
      resolved.push_back({rows.defined() ? pick(rows, closedIdx) : closedIdx,
                          pick(sp, closedIdx), pick(order, closedIdx)});
    // An open row needs at least (topP - its mass) / its smallest candidate
    // more tokens (later ones are no more likely): a flat row goes to the
    // sort at once instead of through every size.
    at::Tensor more =
        ((topP - pick(cdf.select(-1, n - 1), openIdx)) / pick(last, openIdx))
            .clamp(0.0, static_cast<double>(V));
    n = std::min(V, std::max(n * 8, n + static_cast<int64_t>(std::ceil(
                                            more.max().item<double>()))));
    rows = rows.defined() ? pick(rows, openIdx) : openIdx;
  }
  if (resolved.size() == 1 && !resolved[0].rows.defined())
    return {resolved[0].probs, resolved[0].order};
  int64_t width = 0;
  for (const Resolved &r : resolved)
    width = std::max(width, r.probs.size(1));
  at::Tensor probs = at::zeros({B, width}, p.options());
  at::Tensor order = at::zeros({B, width}, resolved[0].order.options());
  for (const Resolved &r : resolved) {
    int64_t w = r.probs.size(1);
    probs.narrow(1, 0, w).index_copy_(0, r.rows, r.probs);
    order.narrow(1, 0, w).index_copy_(0, r.rows, r.order);
  }
  return {probs, order};
}

/// sampleTokens with the uniforms drawn by \p draw(B) ([B, 1] float, CPU),
/// called only when a row is sampled (not greedy, B > 0).
SampledTokens sampleTokensWith(const at::Tensor &logitsIn,
                               const SamplingOptions &options,
                               const std::function<at::Tensor(int64_t)> &draw,
                               const std::vector<int64_t> *siblings) {
  if (logitsIn.dim() != 2)
    throw std::runtime_error("sampleTokens: logits must be [B, V]");
  int64_t B = logitsIn.size(0), V = logitsIn.size(1);
  at::Tensor logits = logitsIn.to(at::kFloat);
  bool greedy = options.temperature <= 0;
  at::Tensor logp = at::log_softmax(
      greedy ? logits : logits / options.temperature, -1); // [B, V]
  at::Tensor probs = logp.exp();
  // 0 * -inf would be NaN for tokens of probability zero.
  at::Tensor entropy =
      -at::where(probs > 0, probs * logp, at::zeros_like(probs)).sum(-1);

  at::Tensor tokens;
  if (greedy || B == 0) {
    tokens = logp.argmax(-1);
  } else {
    at::Tensor filtered = logp;
    if (options.topK > 0 && options.topK < V) {
      at::Tensor kth = std::get<0>(filtered.topk(options.topK, -1))
                           .narrow(-1, options.topK - 1, 1);
      filtered = filtered.masked_fill(filtered < kth,
                                      -std::numeric_limits<float>::infinity());
    }
    at::Tensor p = filtered.exp();
    at::Tensor order;
    if (options.topP < 1.0) // p in descending order from here on
      std::tie(p, order) = nucleus(p, options.topP);
    // Inverse-CDF sampling with one CPU uniform per row: deterministic from
    // the generator on any device.
    const int64_t N = p.size(1);
    at::Tensor u = draw(B).to(p.device());
    at::Tensor cdf = p.cumsum(-1);
    at::Tensor target = u * cdf.narrow(-1, N - 1, 1);
    at::Tensor idx = at::searchsorted(cdf, target, /*out_int32=*/false,
                                      /*right=*/true)
                         .clamp_max(N - 1);
    // A zero-probability index can only come from rounding at the very end
    // of the CDF; step back to the last token with mass.
    at::Tensor pickedP = p.gather(-1, idx);
    if ((pickedP <= 0).any().item<bool>()) {
      at::Tensor lastPos =
          (at::arange(N, p.options().dtype(at::kLong)).unsqueeze(0) *
           (p > 0).to(at::kLong))
              .argmax(-1, /*keepdim=*/true);
      idx = at::where(pickedP > 0, idx, lastPos);
    }
    tokens = order.defined() ? order.gather(-1, idx).squeeze(-1)
                             : idx.squeeze(-1);
    if (siblings)
      sampleSiblingsWithoutReplacement(p, order, u, *siblings, tokens);
  }
  at::Tensor chosenLogp = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1);
  return {tokens.to(at::kCPU, at::kLong), chosenLogp.to(at::kCPU),
          entropy.to(at::kCPU)};
}

} // namespace

SampledTokens sampleTokens(const at::Tensor &logits,
                           const SamplingOptions &options, at::Generator &gen,
                           const std::vector<int64_t> *siblings) {
  return sampleTokensWith(
      logits, options,
      [&](int64_t B) { return at::rand({B, 1}, gen, at::kFloat); }, siblings);
}

SampledTokens sampleTokens(const at::Tensor &logits,
                           const SamplingOptions &options,
                           const at::Tensor &uniforms,
                           const std::vector<int64_t> *siblings) {
  if (uniforms.dim() != 1 || uniforms.size(0) != logits.size(0))
    throw std::runtime_error("sampleTokens: uniforms must be [B]");
  return sampleTokensWith(
      logits, options,
      [&](int64_t B) { return uniforms.to(at::kCPU, at::kFloat).view({B, 1}); },
      siblings);
}

Decoder::Decoder(TransformerLM model, SamplingOptions options,
                 const Tokenizer *tokenizer)
    : model_(std::move(model)), options_(std::move(options)),
      tokenizer_(tokenizer), cached_(options_.useCache) {
  if (!options_.stopStrings.empty() && !tokenizer_)
    throw std::runtime_error("Decoder: stop strings need a tokenizer");
  if (options_.maxNewTokens < 0)
    throw std::runtime_error("Decoder: maxNewTokens must be >= 0");
  if (options_.topP <= 0 || options_.topP > 1)
    throw std::runtime_error("Decoder: topP must be in (0, 1]");
}

int64_t Decoder::numUnfinished() const {
  int64_t n = 0;
  for (const auto &r : rows_)
    n += r.finished() ? 0 : 1;
  return n;
}

void Decoder::start(const std::vector<std::vector<int64_t>> &prompts) {
  if (started_)
    throw std::runtime_error("Decoder: start() may be called only once");
  started_ = true;
  const ModelConfig &cfg = model_->config();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto &p = prompts[i];
    if (p.empty())
      throw std::runtime_error("Decoder: prompt " + std::to_string(i) +
                               " is empty (start it with BOS)");
    for (int64_t id : p)
      if (id < 0 || id >= cfg.vocabSize)
        throw std::runtime_error("Decoder: prompt " + std::to_string(i) +
                                 " holds token id " + std::to_string(id) +
                                 " outside the vocabulary of " +
                                 std::to_string(cfg.vocabSize));
    if (static_cast<int64_t>(p.size()) >= cfg.maxPositionEmbeddings)
      throw std::runtime_error(
          "Decoder: prompt " + std::to_string(i) + " has " +
          std::to_string(p.size()) + " tokens; the model holds " +
          std::to_string(cfg.maxPositionEmbeddings) + " positions");
    GeneratedSequence s;
    s.prompt = p;
    rows_.push_back(std::move(s));
    cacheRow_.push_back(-1); // set by prefillAll
    textSearched_.push_back(0);
  }
  for (size_t i = 0; i < rows_.size(); ++i)
    if (options_.maxNewTokens == 0)
      rows_[i].finish = FinishReason::Length;
  if (!cached_ || prompts.empty() || options_.maxNewTokens == 0)
    return;

  prefillAll();
}

namespace {

/// Rows' prompts and tokens, right-padded: ids and mask [B, L] and the index
/// of each row's last real token.
struct PackedRows {
  at::Tensor ids, mask, last;
};

PackedRows packRows(const std::vector<const GeneratedSequence *> &rows,
                    int64_t padId, torch::Device dev) {
  int64_t B = rows.size(), L = 0;
  for (const GeneratedSequence *s : rows)
    L = std::max<int64_t>(L, s->prompt.size() + s->tokens.size());
  std::vector<int64_t> ids(B * L, padId), last(B);
  std::vector<uint8_t> mask(B * L, 0);
  for (int64_t b = 0; b < B; ++b) {
    const GeneratedSequence &s = *rows[b];
    auto it = std::copy(s.prompt.begin(), s.prompt.end(), ids.begin() + b * L);
    std::copy(s.tokens.begin(), s.tokens.end(), it);
    int64_t n = s.prompt.size() + s.tokens.size();
    std::fill_n(mask.begin() + b * L, n, 1);
    last[b] = n - 1;
  }
  return {at::tensor(ids, at::kLong).view({B, L}).to(dev),
          at::tensor(mask, at::kByte).view({B, L}).to(dev, at::kBool),
          at::tensor(last, at::kLong).to(dev)};
}

} // namespace

void Decoder::prefillAll() {
  torch::NoGradGuard noGrad;
  std::vector<const GeneratedSequence *> live;
  int64_t remaining = 0;
  for (size_t r = 0; r < rows_.size(); ++r) {
    cacheRow_[r] = -1;
    if (rows_[r].finished())
      continue;
    cacheRow_[r] = static_cast<int64_t>(live.size());
    live.push_back(&rows_[r]);
    remaining = std::max<int64_t>(
        remaining,
        options_.maxNewTokens - static_cast<int64_t>(rows_[r].tokens.size()));
  }
  cache_ = KVCache();
  nextLogits_ = at::Tensor();
  if (live.empty())
    return;
  auto dev = model_->device();
  PackedRows p = packRows(live, options_.padId, dev);
  cache_.reserve(p.ids.size(1) + remaining);
  int64_t tokens = 0;
  for (size_t i = 0; i < live.size(); ++i)
    tokens +=
        static_cast<int64_t>(live[i]->prompt.size() + live[i]->tokens.size()) +
        tokensToFeed(*live[i]);
  cache_.reserveTokens(tokens);
  at::Tensor h = model_->forwardHidden(p.ids, p.mask, &cache_);
  at::Tensor hLast = h.index({at::arange(p.ids.size(0), p.last.options()),
                              p.last});
  nextLogits_ = model_->lmHead(hLast).to(at::kFloat);
}

int64_t Decoder::tokensToFeed(const GeneratedSequence &row) const {
  // Of the tokens a row has left, all but the last are fed back.
  return std::max<int64_t>(0, options_.maxNewTokens -
                                  static_cast<int64_t>(row.tokens.size()) - 1);
}

at::Tensor Decoder::logitsFor(const std::vector<int64_t> &rows) {
  auto dev = model_->device();
  if (cached_) {
    std::vector<int64_t> idx;
    idx.reserve(rows.size());
    for (int64_t r : rows)
      idx.push_back(cacheRow_[r]);
    return nextLogits_.index_select(0, at::tensor(idx, at::kLong).to(dev));
  }
  // Uncached: run every row's whole sequence again.
  torch::NoGradGuard noGrad;
  std::vector<const GeneratedSequence *> seqs;
  for (int64_t r : rows)
    seqs.push_back(&rows_[r]);
  PackedRows p = packRows(seqs, options_.padId, dev);
  at::Tensor h = model_->forwardHidden(p.ids, p.mask, nullptr);
  return model_
      ->lmHead(h.index({at::arange(p.ids.size(0), p.last.options()), p.last}))
      .to(at::kFloat);
}

std::string decodeKnown(const Tokenizer &tokenizer,
                        const std::vector<int64_t> &ids) {
  try {
    return tokenizer.decode(ids, /*skipSpecialTokens=*/true);
  } catch (const std::exception &) {
    // Some id is unknown to the tokenizer; drop those ids (decoding is a
    // concatenation per token for both tokenizers, so the rest is exact).
  }
  std::vector<int64_t> known;
  for (int64_t id : ids) {
    try {
      tokenizer.decode({id}, /*skipSpecialTokens=*/true);
      known.push_back(id);
    } catch (const std::exception &) {
    }
  }
  return tokenizer.decode(known, /*skipSpecialTokens=*/true);
}

std::string Decoder::decodeText(const std::vector<int64_t> &ids) const {
  return decodeKnown(*tokenizer_, ids);
}

void Decoder::finishChecks(int64_t row) {
  GeneratedSequence &s = rows_[row];
  int64_t tok = s.tokens.back();
  if (std::find(options_.stopTokens.begin(), options_.stopTokens.end(), tok) !=
      options_.stopTokens.end())
    s.finish = FinishReason::Stop;
  if (!s.finished() && !options_.stopStrings.empty()) {
    std::string text = decodeText(s.tokens);
    size_t best = std::string::npos;
    const std::string *which = nullptr;
    for (const std::string &stop : options_.stopStrings) {
      if (stop.empty())
        continue;
      size_t from = textSearched_[row] >= stop.size()
                        ? textSearched_[row] - stop.size() + 1
                        : 0;
      size_t at = text.find(stop, from);
      if (at != std::string::npos && at < best) {
        best = at;
        which = &stop;
      }
    }
    textSearched_[row] = text.size();
    if (which) {
      s.finish = FinishReason::Stop;
      s.stopString = *which;
      s.text = text.substr(0, best);
      return;
    }
  }
  if (!s.finished()) {
    int64_t total = s.prompt.size() + s.tokens.size();
    if (static_cast<int64_t>(s.tokens.size()) >= options_.maxNewTokens ||
        total >= model_->config().maxPositionEmbeddings)
      s.finish = FinishReason::Length;
  }
  if (s.finished() && tokenizer_)
    s.text = decodeText(s.tokens);
}

namespace {

/// \p siblings (by decoder row) for the \p active rows.
std::vector<int64_t> activeSiblings(const std::vector<int64_t> &siblings,
                                    const std::vector<int64_t> &active,
                                    size_t numRows) {
  if (siblings.size() != numRows)
    throw std::runtime_error("Decoder::step: siblings must have one entry "
                             "per row");
  std::vector<int64_t> out;
  for (int64_t r : active)
    out.push_back(siblings[static_cast<size_t>(r)]);
  return out;
}

} // namespace

int64_t Decoder::step(at::Generator &gen) {
  return stepWith([&](const at::Tensor &logits, const std::vector<int64_t> &) {
    return sampleTokens(logits, options_, gen);
  });
}

int64_t Decoder::step(at::Generator &gen,
                      const std::vector<int64_t> &siblings) {
  return stepWith(
      [&](const at::Tensor &logits, const std::vector<int64_t> &active) {
        std::vector<int64_t> s = activeSiblings(siblings, active, rows_.size());
        return sampleTokens(logits, options_, gen, &s);
      });
}

int64_t Decoder::step(const RowUniforms &uniforms) {
  return stepUniforms(uniforms, nullptr);
}

int64_t Decoder::step(const RowUniforms &uniforms,
                      const std::vector<int64_t> &siblings) {
  return stepUniforms(uniforms, &siblings);
}

int64_t Decoder::stepUniforms(const RowUniforms &uniforms,
                              const std::vector<int64_t> *siblings) {
  return stepWith(
      [&](const at::Tensor &logits, const std::vector<int64_t> &active) {
        std::vector<float> u(active.size());
        for (size_t i = 0; i < active.size(); ++i)
          u[i] = uniforms(active[i],
                          static_cast<int64_t>(rows_[active[i]].tokens.size()));
        at::Tensor ut = at::tensor(u, at::kFloat);
        if (!siblings)
          return sampleTokens(logits, options_, ut);
        std::vector<int64_t> s = activeSiblings(*siblings, active, rows_.size());
        return sampleTokens(logits, options_, ut, &s);
      });
}

int64_t Decoder::stepWith(const Sampler &sample) {
  if (!started_)
    throw std::runtime_error("Decoder: step() before start()");
  std::vector<int64_t> active;
  for (size_t r = 0; r < rows_.size(); ++r)
    if (!rows_[r].finished())
      active.push_back(static_cast<int64_t>(r));
  if (active.empty())
    return 0;
  torch::NoGradGuard noGrad;
  at::Tensor logits = logitsFor(active);
  SampledTokens sampled = sample(logits, active);
  auto tok = sampled.tokens.accessor<int64_t, 1>();
  auto lp = sampled.logprobs.accessor<float, 1>();
  auto ent = sampled.entropies.accessor<float, 1>();
  std::vector<int64_t> still, fed;
  for (size_t i = 0; i < active.size(); ++i) {
    GeneratedSequence &s = rows_[active[i]];
    s.tokens.push_back(tok[i]);
    s.logprobs.push_back(lp[i]);
    s.entropies.push_back(ent[i]);
    if (!s.observation.empty())
      s.observation.push_back(0);
    finishChecks(active[i]);
    // The sampled token, then any observation the tool appended after it.
    int64_t count = 1;
    if (!s.finished() && options_.tool)
      count += answerTool(active[i]);
    if (s.finished()) {
      if (!options_.retainFinished)
        cacheRow_[active[i]] = -1;
    } else {
      still.push_back(active[i]);
      fed.push_back(count);
    }
  }
  if (still.empty() || !cached_)
    return static_cast<int64_t>(still.size());

  // Drop finished rows from the cache once they are half of it (unless they
  // are retained for forkAt()).
  if (!options_.retainFinished &&
      static_cast<int64_t>(still.size()) * 2 <= cache_.batchSize()) {
    std::vector<int64_t> keep;
    int64_t remaining = 0;
    for (int64_t r : still) {
      keep.push_back(cacheRow_[r]);
      cacheRow_[r] = static_cast<int64_t>(keep.size()) - 1;
      remaining = std::max<int64_t>(
          remaining, options_.maxNewTokens -
                         static_cast<int64_t>(rows_[r].tokens.size()));
    }
    cache_ = cache_.select(keep, remaining);
  }
  feedTokens(still, fed);
  return static_cast<int64_t>(still.size());
}

void Decoder::feedTokens(const std::vector<int64_t> &rows,
                         const std::vector<int64_t> &counts) {
  auto dev = model_->device();
  int64_t Bc = cache_.batchSize(), T = 1;
  for (int64_t c : counts)
    T = std::max(T, c);
  // Right-padded blocks: a row without an observation feeds its one
  // sampled token (T = 1 unless some row has a tool reply).
  std::vector<int64_t> ids(Bc * T, options_.padId), last(Bc, 0);
  std::vector<uint8_t> mask(Bc * T, 0);
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::vector<int64_t> &toks = rows_[rows[i]].tokens;
    int64_t b = cacheRow_[rows[i]], n = counts[i];
    std::copy(toks.end() - n, toks.end(), ids.begin() + b * T);
    std::fill_n(mask.begin() + b * T, n, 1);
    last[b] = n - 1;
  }
  at::Tensor idsT = at::tensor(ids, at::kLong).view({Bc, T}).to(dev);
  at::Tensor maskT =
      at::tensor(mask, at::kByte).view({Bc, T}).to(dev, at::kBool);
  at::Tensor h = model_->forwardHidden(idsT, maskT, &cache_);
  at::Tensor hLast = h.select(1, 0);
  if (T > 1)
    hLast = h.index({at::arange(Bc, at::TensorOptions(at::kLong).device(dev)),
                     at::tensor(last, at::kLong).to(dev)});
  nextLogits_ = model_->lmHead(hLast).to(at::kFloat);
}

int64_t Decoder::answerTool(int64_t row) {
  GeneratedSequence &s = rows_[row];
  auto where = [&] {
    return "row " + std::to_string(row) + ", tool call " +
           std::to_string(s.toolCalls + 1) + " (after " +
           std::to_string(s.tokens.size()) + " generated tokens)";
  };
  std::optional<ToolReply> reply;
  try {
    reply = options_.tool(s);
  } catch (const std::exception &e) {
    throw std::runtime_error(where() + ": the tool failed: " + e.what());
  }
  if (!reply)
    return 0;
  const ModelConfig &cfg = model_->config();
  for (int64_t id : reply->observation)
    if (id < 0 || id >= cfg.vocabSize)
      throw std::runtime_error(where() + ": the tool's reply holds token id " +
                               std::to_string(id) +
                               " outside the vocabulary of " +
                               std::to_string(cfg.vocabSize));
  ++s.toolCalls;
  s.toolOk += reply->ok ? 1 : 0;
  s.toolFailed += reply->failed ? 1 : 0;
  if (reply->observation.empty())
    return 0;
  ++s.toolTurns;
  int64_t used = static_cast<int64_t>(s.tokens.size());
  int64_t room = std::min(options_.maxNewTokens - used,
                          cfg.maxPositionEmbeddings - used -
                              static_cast<int64_t>(s.prompt.size()));
  int64_t n = std::clamp<int64_t>(
      static_cast<int64_t>(reply->observation.size()), 0, room);
  s.observation.resize(s.tokens.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    s.tokens.push_back(reply->observation[static_cast<size_t>(k)]);
    s.logprobs.push_back(0.0f);
    s.entropies.push_back(0.0f);
    s.observation.push_back(1);
  }
  if (n == room) // the reply filled the row (or was cut)
    s.finish = FinishReason::Length;
  if (tokenizer_ && (s.finished() || !options_.stopStrings.empty())) {
    // A stop string in the reply does not end the row: the search goes on
    // after it.
    std::string text = decodeText(s.tokens);
    textSearched_[row] = text.size();
    if (s.finished())
      s.text = std::move(text);
  }
  return n;
}

void Decoder::run(at::Generator &gen, int64_t maxSteps) {
  for (int64_t i = 0; maxSteps < 0 || i < maxSteps; ++i)
    if (step(gen) == 0)
      break;
}

void Decoder::run(const RowUniforms &uniforms, int64_t maxSteps) {
  for (int64_t i = 0; maxSteps < 0 || i < maxSteps; ++i)
    if (step(uniforms) == 0)
      break;
}

Decoder Decoder::fork(const std::vector<int64_t> &rows) const {
  Decoder d(model_, options_, tokenizer_);
  d.started_ = true;
  std::vector<int64_t> cacheIdx;
  int64_t remaining = 0;
  for (int64_t r : rows) {
    if (r < 0 || r >= static_cast<int64_t>(rows_.size()))
      throw std::runtime_error("Decoder::fork: row " + std::to_string(r) +
                               " out of range [0, " +
                               std::to_string(rows_.size()) + ")");
    d.rows_.push_back(rows_[r]);
    d.textSearched_.push_back(textSearched_[r]);
    if (cached_ && !rows_[r].finished()) {
      d.cacheRow_.push_back(static_cast<int64_t>(cacheIdx.size()));
      cacheIdx.push_back(cacheRow_[r]);
      remaining = std::max<int64_t>(
          remaining,
          options_.maxNewTokens - static_cast<int64_t>(rows_[r].tokens.size()));
    } else {
      d.cacheRow_.push_back(-1);
    }
  }
  if (!cacheIdx.empty()) {
    d.cache_ = cache_.select(cacheIdx, remaining);
    int64_t tokens = 0;
    for (const GeneratedSequence &s : d.rows_)
      tokens += s.finished() ? 0 : tokensToFeed(s);
    d.cache_.reserveTokens(tokens);
    d.nextLogits_ = nextLogits_.index_select(
        0, at::tensor(cacheIdx, at::kLong).to(nextLogits_.device()));
  }
  return d;
}

Decoder Decoder::forkAt(const std::vector<int64_t> &rows,
                        const std::vector<int64_t> &numTokens) const {
  if (rows.size() != numTokens.size())
    throw std::runtime_error("Decoder::forkAt: " + std::to_string(rows.size()) +
                             " rows but " + std::to_string(numTokens.size()) +
                             " token counts");
  Decoder d(model_, options_, tokenizer_);
  d.started_ = true;
  bool live = cached_;
  int64_t maxPos = model_->config().maxPositionEmbeddings;
  for (size_t i = 0; i < rows.size(); ++i) {
    int64_t r = rows[i], n = numTokens[i];
    if (r < 0 || r >= static_cast<int64_t>(rows_.size()))
      throw std::runtime_error("Decoder::forkAt: row " + std::to_string(r) +
                               " out of range [0, " +
                               std::to_string(rows_.size()) + ")");
    const GeneratedSequence &src = rows_[r];
    if (n < 0 || n > static_cast<int64_t>(src.tokens.size()))
      throw std::runtime_error("Decoder::forkAt: row " + std::to_string(r) +
                               " has " + std::to_string(src.tokens.size()) +
                               " generated tokens, cannot keep " +
                               std::to_string(n));
    GeneratedSequence s;
    s.prompt = src.prompt;
    s.tokens.assign(src.tokens.begin(), src.tokens.begin() + n);
    s.logprobs.assign(src.logprobs.begin(), src.logprobs.begin() + n);
    s.entropies.assign(src.entropies.begin(), src.entropies.begin() + n);
    if (!src.observation.empty())
      s.observation.assign(src.observation.begin(),
                           src.observation.begin() + n);
    if (n >= options_.maxNewTokens ||
        static_cast<int64_t>(s.prompt.size()) + n >= maxPos)
      s.finish = FinishReason::Length;
    size_t searched = 0;
    if (tokenizer_) {
      std::string text = decodeText(s.tokens);
      searched = text.size();
      if (s.finished())
        s.text = std::move(text);
    }
    if (!s.finished() && cacheRow_[r] < 0)
      live = false;
    d.rows_.push_back(std::move(s));
    d.textSearched_.push_back(searched);
    d.cacheRow_.push_back(-1);
  }
  if (!cached_)
    return d;
  if (!live) {
    d.prefillAll();
    return d;
  }
  // Every source row still has its cache: keep all but the last token of
  // each prefix and run that token again to get the next-token logits.
  torch::NoGradGuard noGrad;
  std::vector<int64_t> src, keep, feed;
  int64_t remaining = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const GeneratedSequence &s = d.rows_[i];
    if (s.finished())
      continue;
    d.cacheRow_[i] = static_cast<int64_t>(src.size());
    src.push_back(cacheRow_[rows[i]]);
    int64_t n = static_cast<int64_t>(s.tokens.size());
    keep.push_back(static_cast<int64_t>(s.prompt.size()) + n - 1);
    feed.push_back(n > 0 ? s.tokens.back() : s.prompt.back());
    remaining = std::max<int64_t>(remaining, options_.maxNewTokens - n);
  }
  if (src.empty())
    return d;
  d.cache_ = cache_.selectPrefix(src, keep, remaining + 1);
  int64_t tokens = 0; // the re-fed tokens and what the rows feed after them
  for (const GeneratedSequence &s : d.rows_)
    tokens += s.finished() ? 0 : 1 + tokensToFeed(s);
  d.cache_.reserveTokens(tokens);
  auto dev = model_->device();
  int64_t B = static_cast<int64_t>(feed.size());
  at::Tensor ids = at::tensor(feed, at::kLong).view({B, 1}).to(dev);
  at::Tensor mask =
      at::ones({B, 1}, at::TensorOptions().dtype(at::kBool).device(dev));
  at::Tensor h = d.model_->forwardHidden(ids, mask, &d.cache_);
  d.nextLogits_ = d.model_->lmHead(h.select(1, 0)).to(at::kFloat);
  return d;
}

at::Tensor Decoder::nextTokenLogits() {
  torch::NoGradGuard noGrad;
  int64_t V = model_->config().vocabSize;
  at::Tensor out = at::zeros({static_cast<int64_t>(rows_.size()), V},
                             at::TensorOptions().dtype(at::kFloat).device(
                                 model_->device()));
  std::vector<int64_t> active;
  for (size_t r = 0; r < rows_.size(); ++r)
    if (!rows_[r].finished())
      active.push_back(static_cast<int64_t>(r));
  if (active.empty() || !started_)
    return out;
  out.index_copy_(0, at::tensor(active, at::kLong).to(out.device()),
                  logitsFor(active));
  return out;
}

namespace {

template <typename Source>
std::vector<GeneratedSequence>
generateWith(TransformerLM model,
             const std::vector<std::vector<int64_t>> &prompts,
             const SamplingOptions &options, Source &source,
             const Tokenizer *tokenizer, int64_t samplesPerPrompt) {
  if (samplesPerPrompt < 1)
    throw std::runtime_error("generate: samplesPerPrompt must be >= 1");
  Decoder base(std::move(model), options, tokenizer);
  base.start(prompts);
  if (samplesPerPrompt == 1) {
    base.run(source);
    return base.sequences();
  }
  std::vector<int64_t> rows;
  for (size_t p = 0; p < prompts.size(); ++p)
    for (int64_t k = 0; k < samplesPerPrompt; ++k)
      rows.push_back(static_cast<int64_t>(p));
  Decoder d = base.fork(rows);
  d.run(source);
  return d.sequences();
}

} // namespace

std::vector<GeneratedSequence>
generate(TransformerLM model, const std::vector<std::vector<int64_t>> &prompts,
         const SamplingOptions &options, at::Generator &gen,
         const Tokenizer *tokenizer, int64_t samplesPerPrompt) {
  return generateWith(std::move(model), prompts, options, gen, tokenizer,
                      samplesPerPrompt);
}

std::vector<GeneratedSequence>
generate(TransformerLM model, const std::vector<std::vector<int64_t>> &prompts,
         const SamplingOptions &options, const RowUniforms &uniforms,
         const Tokenizer *tokenizer, int64_t samplesPerPrompt) {
  return generateWith(std::move(model), prompts, options, uniforms, tokenizer,
                      samplesPerPrompt);
}

} // namespace cac::rt
