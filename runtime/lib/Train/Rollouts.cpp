//===- Rollouts.cpp - Rollout plans: group, chain, tree, forest -----------===//

#include "cac/Runtime/Train/Rollouts.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace cac::rt::train {

int64_t Rollout::actions() const {
  int64_t n = static_cast<int64_t>(response.size());
  for (uint8_t o : obs)
    n -= o != 0 ? 1 : 0;
  return n;
}

namespace {

int64_t promptTokens(const std::vector<std::vector<int64_t>> &prompts) {
  int64_t n = 0;
  for (const auto &p : prompts)
    n += static_cast<int64_t>(p.size());
  return n;
}

Rollout toRollout(const PlanContext &ctx, const GeneratedSequence &g,
                  int64_t group) {
  Rollout r;
  r.prompt = g.prompt;
  r.response = g.tokens;
  r.logp = g.logprobs;
  r.entropy = g.entropies;
  r.obs = g.observation;
  r.toolCalls = g.toolCalls;
  r.toolTurns = g.toolTurns;
  r.toolOk = g.toolOk;
  r.toolFailed = g.toolFailed;
  r.group = group;
  r.reward = ctx.reward(group, g.text);
  r.correct = r.reward >= 1.0;
  return r;
}

/// Counts a finished path into the flattened totals.
void countPath(PlanStats &s, const Rollout &r) {
  int64_t t = static_cast<int64_t>(r.response.size());
  s.tokensFlattened += static_cast<int64_t>(r.prompt.size()) + t;
  s.tokensFlattenedResponse += t;
}

/// A decoder row's sampling stream: its prompt and the stream's number
/// within the prompt (PlanContext::uniform).
struct Stream {
  int64_t prompt = 0, id = 0;
};

/// The uniforms of a decoder's rows, row r drawing from stream \p keys[r].
RowUniforms streamUniforms(const PlanContext &ctx,
                           const std::vector<Stream> &keys) {
  return [&ctx, &keys](int64_t row, int64_t t) {
    const Stream &s = keys.at(static_cast<size_t>(row));
    return ctx.uniform(s.prompt, s.id, t);
  };
}

/// Runs \p dec until every row finishes (or \p maxSteps steps), drawing
/// row r's tokens from stream \p keys[r] when ctx.uniform is set, else from
/// ctx.gen.
void runRows(const PlanContext &ctx, Decoder &dec,
             const std::vector<Stream> &keys, int64_t maxSteps = -1) {
  if (ctx.uniform)
    dec.run(streamUniforms(ctx, keys), maxSteps);
  else
    dec.run(*ctx.gen, maxSteps);
}

/// One decoding step of \p dec, drawing as runRows() does; rows with the
/// same \p siblings[row] >= 0 draw distinct tokens (Decoder::step).
void stepRows(const PlanContext &ctx, Decoder &dec,
              const std::vector<Stream> &keys,
              const std::vector<int64_t> &siblings) {
  if (ctx.uniform)
    dec.step(streamUniforms(ctx, keys), siblings);
  else
    dec.step(*ctx.gen, siblings);
}

/// Streams 0..times-1 of each of \p count prompts, prompt-major (the rows of
/// repeatEach(count, times)).
std::vector<Stream> samplesOfEach(size_t count, int64_t times) {
  std::vector<Stream> keys;
  for (size_t i = 0; i < count; ++i)
    for (int64_t k = 0; k < times; ++k)
      keys.push_back({static_cast<int64_t>(i), k});
  return keys;
}

std::vector<int64_t> repeatEach(size_t count, int64_t times) {
  std::vector<int64_t> rows;
  for (size_t i = 0; i < count; ++i)
    for (int64_t k = 0; k < times; ++k)
      rows.push_back(static_cast<int64_t>(i));
  return rows;
}

/// The entropy of each row's next-token distribution at temperature \p temp
/// (over the top \p topK tokens, renormalised, when 0 < topK < vocabulary:
/// TreeAdv's approximation), as a CPU float tensor.
at::Tensor nextTokenEntropy(const at::Tensor &logits, double temp,
                            int64_t topK) {
  at::Tensor logp = at::log_softmax(logits / temp, -1);
  if (topK > 0 && topK < logp.size(-1)) {
    at::Tensor top = std::get<0>(logp.topk(topK, -1));
    logp = top - top.logsumexp(-1, /*keepdim=*/true);
  }
  return -(logp.exp() * logp).nan_to_num(0.0).sum(-1).to(at::kCPU, at::kFloat);
}

/// Whether \p token's text ends with one of spec.delimiters (always true
/// without delimiters; false without a tokenizer or when it cannot decode).
bool endsWithDelimiter(const PlanContext &ctx, const RolloutSpec &spec,
                       int64_t token) {
  if (spec.delimiters.empty() || !ctx.tokenizer)
    return spec.delimiters.empty();
  std::string text;
  try {
    text = ctx.tokenizer->decode({token}, /*skipSpecialTokens=*/true);
  } catch (const std::exception &) {
    return false;
  }
  for (const std::string &d : spec.delimiters)
    if (text.size() >= d.size() &&
        text.compare(text.size() - d.size(), d.size(), d) == 0)
      return true;
  return false;
}

/// Samples one linear rollout per row of \p rows (prompt ids) from \p root,
/// row i from stream \p keys[i], all of its tokens on node \p nodes[i], and
/// appends them to \p out.
void appendLinearRollouts(const PlanContext &ctx, Decoder &root,
                          const std::vector<int64_t> &rows,
                          const std::vector<int64_t> &nodes,
                          const std::vector<Stream> &keys, RolloutBatch &out) {
  PlanStats &st = out.stats;
  Decoder fill = root.fork(rows);
  runRows(ctx, fill, keys);
  for (size_t i = 0; i < fill.size(); ++i) {
    const GeneratedSequence &g = fill.sequence(i);
    out.rolls.push_back(toRollout(ctx, g, rows[i]));
    out.tokenNode.emplace_back(g.tokens.size(), nodes[i]);
    int64_t t = static_cast<int64_t>(g.tokens.size());
    st.tokensComputed += t;
    st.tokensSampled += t;
    countPath(st, out.rolls.back());
  }
}

/// Orders the paths of \p out by prompt (the estimator's groups), stably,
/// and counts its nodes and leaves.
void groupPaths(RolloutBatch &out) {
  std::vector<size_t> order(out.rolls.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return out.rolls[a].group < out.rolls[b].group;
  });
  std::vector<Rollout> rolls;
  std::vector<std::vector<int64_t>> tn;
  for (size_t i : order) {
    rolls.push_back(std::move(out.rolls[i]));
    tn.push_back(std::move(out.tokenNode[i]));
  }
  out.rolls = std::move(rolls);
  out.tokenNode = std::move(tn);
  out.stats.nodes = static_cast<int64_t>(out.nodeParent.size());
  out.stats.leaves = static_cast<int64_t>(out.rolls.size());
}

} // namespace

std::string planMismatch(const RolloutSpec &spec, const std::string &name,
                         bool readsMcValue, bool needsTree, bool hasCritic) {
  using K = RolloutSpec::Kind;
  std::string est = "estimator '" + name + "'";
  if (readsMcValue && spec.kind != K::Chain)
    return est + " reads the segment input 'mc_value': set rollout = "
                 "chain(n = .., samples = ..)";
  if (!readsMcValue && spec.kind == K::Chain)
    return "rollout = chain(...) samples Monte-Carlo values for an "
           "'mc_value : seg' input, which " + est + " does not read";
  bool treePlan = spec.kind == K::Tree || spec.kind == K::Forest;
  if (needsTree && !treePlan)
    return est + " reads the rollout tree: set rollout = tree(branches = "
                 "\"..\", seg_len = ..) or forest(n = .., trees = .., ...)";
  if (!needsTree && treePlan)
    return std::string("rollout = ") + spec.kindName() +
           "(...) builds a rollout tree, which " + est +
           " does not read (use group(...) or an estimator with a tree input)";
  if (spec.kind == K::Tree && hasCritic)
    return "rollout = tree(...) trains every node once and takes no critic";
  return "";
}

RolloutBatch sampleGroups(const PlanContext &ctx,
                          const std::vector<std::vector<int64_t>> &prompts,
                          int64_t n) {
  RolloutBatch out;
  std::vector<GeneratedSequence> gen;
  if (ctx.uniform)
    gen = generate(
        ctx.model, prompts, ctx.options,
        [&](int64_t row, int64_t t) { return ctx.uniform(row / n, row % n, t); },
        ctx.tokenizer, n);
  else
    gen = generate(ctx.model, prompts, ctx.options, *ctx.gen, ctx.tokenizer, n);
  out.stats.tokensComputed = promptTokens(prompts);
  for (size_t i = 0; i < gen.size(); ++i) {
    out.rolls.push_back(toRollout(ctx, gen[i], static_cast<int64_t>(i) / n));
    int64_t t = static_cast<int64_t>(gen[i].tokens.size());
    out.stats.tokensComputed += t;
    out.stats.tokensSampled += t;
    countPath(out.stats, out.rolls.back());
  }
  out.stats.leaves = static_cast<int64_t>(out.rolls.size());
  return out;
}

RolloutBatch sampleChain(const PlanContext &ctx,
                         const std::vector<std::vector<int64_t>> &prompts,
                         const RolloutSpec &spec,
                         const SegmentStartsFn &segmentStarts) {
  RolloutBatch out;
  PlanStats &st = out.stats;
  SamplingOptions o = ctx.options;
  o.retainFinished = true; // the MC states fork the finished rollouts
  Decoder root(ctx.model, o, ctx.tokenizer);
  root.start(prompts);
  st.tokensComputed += promptTokens(prompts);
  Decoder dec = root.fork(repeatEach(prompts.size(), spec.n));
  runRows(ctx, dec, samplesOfEach(prompts.size(), spec.n));
  for (size_t i = 0; i < dec.size(); ++i) {
    out.rolls.push_back(
        toRollout(ctx, dec.sequence(i), static_cast<int64_t>(i) / spec.n));
    int64_t t = static_cast<int64_t>(dec.sequence(i).tokens.size());
    st.tokensComputed += t;
    st.tokensSampled += t;
    countPath(st, out.rolls.back());
  }
  st.leaves = static_cast<int64_t>(out.rolls.size());

  // The states before every segment start, N_mc continuations each.
  out.segStarts = segmentStarts(out.rolls);
  if (out.segStarts.size() != out.rolls.size())
    throw std::runtime_error("chain rollouts: segment starts for " +
                             std::to_string(out.segStarts.size()) +
                             " rollouts, expected " +
                             std::to_string(out.rolls.size()));
  std::vector<int64_t> rows, keep, offsets(out.rolls.size() + 1, 0);
  // The distinct queries: a prompt and the prefix before a segment start;
  // query[i][j] is segment j of rollout i's. Their continuations' streams
  // are n, n+1, ... within each prompt.
  std::map<std::pair<int64_t, std::vector<int64_t>>, size_t> queryOf;
  std::vector<std::vector<size_t>> query(out.rolls.size());
  std::vector<Stream> mcKeys;
  std::vector<int64_t> nextStream(prompts.size(), spec.n);
  size_t numQueries = 0;
  for (size_t i = 0; i < out.rolls.size(); ++i) {
    const Rollout &roll = out.rolls[i];
    int64_t T = static_cast<int64_t>(roll.response.size());
    offsets[i + 1] = offsets[i] + T;
    if (static_cast<int64_t>(out.segStarts[i].size()) > std::max<int64_t>(T, 1))
      throw std::runtime_error("chain rollouts: more segments than tokens");
    for (int64_t b : out.segStarts[i]) {
      if (b < 0 || b >= std::max<int64_t>(T, 1))
        throw std::runtime_error("chain rollouts: segment start " +
                                 std::to_string(b) + " outside a rollout of " +
                                 std::to_string(T) + " tokens");
      size_t q = numQueries;
      if (spec.dedup) {
        auto [it, fresh] = queryOf.try_emplace(
            {roll.group, std::vector<int64_t>(roll.response.begin(),
                                              roll.response.begin() + b)},
            numQueries);
        q = it->second;
        if (!fresh) {
          ++st.sharedQueries;
          query[i].push_back(q);
          continue;
        }
      }
      ++numQueries;
      query[i].push_back(q);
      for (int64_t k = 0; k < spec.samples; ++k) {
        rows.push_back(static_cast<int64_t>(i));
        keep.push_back(b);
        int64_t g = roll.group;
        mcKeys.push_back({g, nextStream.at(static_cast<size_t>(g))++});
      }
    }
  }
  out.mcValue.assign(static_cast<size_t>(offsets.back()), 0.0f);
  st.nodes = static_cast<int64_t>(numQueries);
  if (rows.empty())
    return out;
  Decoder mc = dec.forkAt(rows, keep);
  mc.options().retainFinished = false;
  // forkAt re-feeds each row's last kept token to get its next logits.
  st.tokensComputed += static_cast<int64_t>(rows.size());
  runRows(ctx, mc, mcKeys);
  std::vector<double> value(numQueries, 0.0);
  for (size_t r = 0; r < rows.size(); ++r) {
    const GeneratedSequence &g = mc.sequence(r);
    value[r / static_cast<size_t>(spec.samples)] +=
        ctx.reward(out.rolls[static_cast<size_t>(rows[r])].group, g.text);
    int64_t added = static_cast<int64_t>(g.tokens.size()) - keep[r];
    st.tokensComputed += added;
    st.tokensSampled += added;
    st.tokensFlattened +=
        static_cast<int64_t>(g.prompt.size() + g.tokens.size());
    st.tokensFlattenedResponse += static_cast<int64_t>(g.tokens.size());
  }
  for (size_t i = 0; i < out.rolls.size(); ++i)
    for (size_t j = 0; j < query[i].size(); ++j)
      out.mcValue[offsets[i] + j] = static_cast<float>(
          value[query[i][j]] / static_cast<double>(spec.samples));
  return out;
}

RolloutBatch sampleTree(const PlanContext &ctx,
                        const std::vector<std::vector<int64_t>> &prompts,
                        const RolloutSpec &spec) {
  if (spec.branches.empty())
    throw std::runtime_error("tree rollouts: no branch factors");
  RolloutBatch out;
  PlanStats &st = out.stats;
  const int64_t P = static_cast<int64_t>(prompts.size());
  const int64_t D = static_cast<int64_t>(spec.branches.size());
  Decoder root(ctx.model, ctx.options, ctx.tokenizer);
  root.start(prompts);
  st.tokensComputed += promptTokens(prompts);
  // Nodes 0..P-1: the prompts.
  out.nodeParent.assign(static_cast<size_t>(P), -1);

  // Rows of the current depth: their prompt, node, sampling stream (the
  // node's number within its prompt) and per-token nodes.
  Decoder dec = root.fork(repeatEach(prompts.size(), spec.branches[0]));
  std::vector<int64_t> group, node, nodesOf(prompts.size(), 0);
  std::vector<Stream> keys;
  std::vector<std::vector<int64_t>> tokNodes;
  for (size_t i = 0; i < dec.size(); ++i) {
    group.push_back(static_cast<int64_t>(i) / spec.branches[0]);
    node.push_back(static_cast<int64_t>(out.nodeParent.size()));
    out.nodeParent.push_back(group.back());
    keys.push_back({group.back(), nodesOf[group.back()]++});
    tokNodes.emplace_back();
  }
  for (int64_t d = 0; d < D; ++d) {
    runRows(ctx, dec, keys, d + 1 < D ? spec.segLen : -1);
    std::vector<int64_t> grow; // rows that expand at depth d + 1
    for (size_t i = 0; i < dec.size(); ++i) {
      const GeneratedSequence &g = dec.sequence(i);
      int64_t added = static_cast<int64_t>(g.tokens.size()) -
                      static_cast<int64_t>(tokNodes[i].size());
      tokNodes[i].insert(tokNodes[i].end(), static_cast<size_t>(added),
                         node[i]);
      st.tokensComputed += added;
      st.tokensSampled += added;
      if (g.finished()) {
        out.rolls.push_back(toRollout(ctx, g, group[i]));
        out.tokenNode.push_back(tokNodes[i]);
        countPath(st, out.rolls.back());
      } else {
        grow.push_back(static_cast<int64_t>(i));
      }
    }
    if (grow.empty())
      break;
    if (d + 1 >= D)
      throw std::runtime_error("tree rollouts: a row is unfinished after "
                               "the last depth");
    int64_t w = spec.branches[d + 1];
    std::vector<int64_t> rows, nGroup, nNode;
    std::vector<Stream> nKeys;
    std::vector<std::vector<int64_t>> nTok;
    for (int64_t i : grow)
      for (int64_t k = 0; k < w; ++k) {
        rows.push_back(i);
        nGroup.push_back(group[i]);
        nNode.push_back(static_cast<int64_t>(out.nodeParent.size()));
        out.nodeParent.push_back(node[i]);
        nKeys.push_back({group[i], nodesOf[group[i]]++});
        nTok.push_back(tokNodes[i]);
      }
    dec = dec.fork(rows);
    group = std::move(nGroup);
    node = std::move(nNode);
    keys = std::move(nKeys);
    tokNodes = std::move(nTok);
  }
  groupPaths(out);
  return out;
}

RolloutBatch sampleForest(const PlanContext &ctx,
                          const std::vector<std::vector<int64_t>> &prompts,
                          const RolloutSpec &spec, double tau) {
  RolloutBatch out;
  PlanStats &st = out.stats;
  const int64_t P = static_cast<int64_t>(prompts.size());
  const int64_t perTree = spec.n / spec.trees;
  Decoder root(ctx.model, ctx.options, ctx.tokenizer);
  root.start(prompts);
  st.tokensComputed += promptTokens(prompts);

  // Per row: its prompt, tree, current node, per-token nodes, and whether
  // it may branch (the first high-entropy position after a delimiter; the
  // response start counts as after one).
  // A row samples from its node's stream: the node's number within its
  // prompt.
  struct RowInfo {
    int64_t group, tree, node;
    std::vector<int64_t> tokNodes;
    bool armed;
  };
  std::vector<int64_t> paths(static_cast<size_t>(P * spec.trees), 1);
  std::vector<RowInfo> info;
  std::vector<int64_t> nodeStream, nodesOf(prompts.size(), 0);
  auto newNode = [&](int64_t parent, int64_t group) {
    out.nodeParent.push_back(parent);
    nodeStream.push_back(nodesOf.at(static_cast<size_t>(group))++);
    return static_cast<int64_t>(out.nodeParent.size()) - 1;
  };
  auto rowKeys = [&] {
    std::vector<Stream> keys;
    for (const RowInfo &ri : info)
      keys.push_back({ri.group, nodeStream[static_cast<size_t>(ri.node)]});
    return keys;
  };
  Decoder dec = root.fork(repeatEach(prompts.size(), spec.trees));
  for (size_t i = 0; i < dec.size(); ++i) {
    int64_t g = static_cast<int64_t>(i) / spec.trees;
    info.push_back({g, static_cast<int64_t>(i), newNode(-1, g), {}, true});
  }
  const double temp = ctx.options.temperature > 0 ? ctx.options.temperature : 1;

  while (dec.numUnfinished() > 0) {
    at::Tensor ent =
        nextTokenEntropy(dec.nextTokenLogits(), temp, spec.entropyTopK);
    auto H = ent.accessor<float, 1>();
    std::vector<int64_t> rows, siblings;
    std::vector<RowInfo> next;
    bool branched = false;
    for (size_t i = 0; i < dec.size(); ++i) {
      RowInfo &ri = info[i];
      int64_t &budget = paths[static_cast<size_t>(ri.tree)];
      int64_t k = 1;
      if (!dec.sequence(i).finished() && ri.armed && H[i] > tau &&
          budget < perTree)
        k = std::min<int64_t>(spec.children, perTree - budget + 1);
      if (k == 1) {
        rows.push_back(static_cast<int64_t>(i));
        siblings.push_back(-1);
        next.push_back(std::move(ri));
        continue;
      }
      branched = true;
      budget += k - 1;
      for (int64_t c = 0; c < k; ++c) {
        rows.push_back(static_cast<int64_t>(i));
        // The children of a branch point draw distinct first tokens.
        siblings.push_back(spec.distinct ? static_cast<int64_t>(i) : -1);
        RowInfo child = ri;
        child.node = newNode(ri.node, ri.group);
        child.armed = spec.delimiters.empty() ? true : false;
        next.push_back(std::move(child));
      }
    }
    info = std::move(next);
    if (branched)
      dec = dec.fork(rows);
    std::vector<size_t> before(dec.size());
    for (size_t i = 0; i < dec.size(); ++i)
      before[i] = dec.sequence(i).tokens.size();
    stepRows(ctx, dec, rowKeys(), siblings);
    for (size_t i = 0; i < dec.size(); ++i) {
      const GeneratedSequence &g = dec.sequence(i);
      if (g.tokens.size() == before[i])
        continue;
      info[i].tokNodes.push_back(info[i].node);
      ++st.tokensComputed;
      ++st.tokensSampled;
      if (!spec.delimiters.empty() && endsWithDelimiter(ctx, spec, g.tokens.back()))
        info[i].armed = true;
    }
  }
  for (size_t i = 0; i < dec.size(); ++i) {
    out.rolls.push_back(toRollout(ctx, dec.sequence(i), info[i].group));
    out.tokenNode.push_back(info[i].tokNodes);
    countPath(st, out.rolls.back());
  }

  // Trees that branched fewer times than their budget: fill the prompt's
  // remaining leaves with linear rollouts from the prompt, each its own
  // one-node tree (estimators.md §6.2, our reconstruction).
  std::vector<int64_t> fillRows, fillNodes;
  std::vector<Stream> fillKeys;
  for (int64_t t = 0; t < P * spec.trees; ++t)
    for (int64_t k = paths[static_cast<size_t>(t)]; k < perTree; ++k) {
      int64_t g = t / spec.trees;
      fillRows.push_back(g);
      fillNodes.push_back(newNode(-1, g));
      fillKeys.push_back({g, nodeStream.back()});
    }
  if (!fillRows.empty())
    appendLinearRollouts(ctx, root, fillRows, fillNodes, fillKeys, out);
  groupPaths(out);
  return out;
}

std::vector<Rollout>
nodeSamples(const RolloutBatch &batch,
            const std::vector<std::vector<float>> &outputs,
            const std::vector<float> &keep,
            std::vector<std::vector<float>> &sampleOutputs) {
  std::vector<Rollout> samples;
  sampleOutputs.assign(outputs.size(), {});
  std::vector<char> seen(batch.nodeParent.size(), 0);
  int64_t offset = 0;
  for (size_t i = 0; i < batch.rolls.size(); ++i) {
    const Rollout &r = batch.rolls[i];
    const std::vector<int64_t> &tn = batch.tokenNode.at(i);
    int64_t T = static_cast<int64_t>(r.response.size());
    for (int64_t s = 0; s < T;) {
      int64_t e = s;
      while (e < T && tn[e] == tn[s])
        ++e;
      int64_t n = tn[s];
      bool fresh = !seen.at(static_cast<size_t>(n));
      seen[static_cast<size_t>(n)] = 1;
      bool kept = keep.empty();
      for (int64_t t = s; t < e && !kept; ++t)
        kept = keep.at(static_cast<size_t>(offset + t)) != 0.0f;
      if (fresh && kept) {
        Rollout x;
        x.prompt = r.prompt;
        x.prompt.insert(x.prompt.end(), r.response.begin(),
                        r.response.begin() + s);
        x.response.assign(r.response.begin() + s, r.response.begin() + e);
        x.logp.assign(r.logp.begin() + s, r.logp.begin() + e);
        x.entropy.assign(r.entropy.begin() + s, r.entropy.begin() + e);
        x.reward = r.reward;
        x.correct = r.correct;
        x.group = r.group;
        samples.push_back(std::move(x));
        for (size_t o = 0; o < outputs.size(); ++o)
          sampleOutputs[o].insert(sampleOutputs[o].end(),
                                  outputs[o].begin() + offset + s,
                                  outputs[o].begin() + offset + e);
      }
      s = e;
    }
    offset += T;
  }
  return samples;
}

} // namespace cac::rt::train
