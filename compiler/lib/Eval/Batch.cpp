//===- Batch.cpp - Rollout batches for `cac eval` -------------------------===//

#include "cac/Eval/Batch.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>
#include <optional>

using namespace cac;
using llvm::json::Array;
using llvm::json::Object;
using llvm::json::Value;

namespace {

llvm::Error fail(llvm::StringRef file, const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 (file + ": " + msg).str());
}

std::optional<double> number(const Value &v) {
  if (auto d = v.getAsNumber())
    if (std::isfinite(*d))
      return d;
  return std::nullopt;
}

/// The state of one parse: the batch being filled and what the sections read
/// so far tell the later ones (the sequence lengths and where they came from,
/// the seq count, the group ids, the rollout tree). One method per section of
/// the batch JSON, run in the order parseBatchJson gives.
struct BatchParser {
  llvm::StringRef file;
  Batch b;
  std::optional<std::vector<int64_t>> lengths;
  std::string lengthsFrom;
  std::optional<size_t> numSeqs;
  std::string seqFrom;
  std::vector<int64_t> groupIds;
  // The rollout tree: parent of each node, and the node of each token (its
  // rows give the sequence lengths when there is no token input).
  std::vector<int64_t> parents;
  std::vector<std::vector<int64_t>> nodeRows;

  llvm::Error checkMembers(Object &root);
  llvm::Error parseParams(Value &p);
  llvm::Error parseToken(Value &t);
  llvm::Error parseTokenArray(const std::string &name, Value &v);
  llvm::Error parseSeq(Value &s);
  llvm::Error parseTree(Value &tv);
  llvm::Error parseTreeParents(Array &par);
  llvm::Error parseTreeRow(size_t r, Value &v);
  llvm::Error checkTreeLengths();
  llvm::Error setSeqOffsets();
  llvm::Error parseObs(Value &ov);
  void setTree();
  llvm::Error parseSeg(Value &sg);
  void setGroups();
};

llvm::Error BatchParser::checkMembers(Object &root) {
  for (auto &kv : root) {
    llvm::StringRef k = kv.first;
    if (k != "params" && k != "token" && k != "seq" && k != "tree" &&
        k != "seg" && k != "obs")
      return fail(file, "unknown member \"" + k +
                            "\"; expected params, token, seq, seg, tree or "
                            "obs");
  }
  return llvm::Error::success();
}

llvm::Error BatchParser::parseParams(Value &p) {
  Object *po = p.getAsObject();
  if (!po)
    return fail(file, "\"params\" must be an object of numbers");
  for (auto &kv : *po) {
    auto d = number(kv.second);
    if (!d)
      return fail(file,
                  "params." + kv.first.str() + " must be a finite number");
    b.params[kv.first.str()] = *d;
  }
  return llvm::Error::success();
}

llvm::Error BatchParser::parseToken(Value &t) {
  Object *to = t.getAsObject();
  if (!to)
    return fail(file, "\"token\" must be an object of ragged arrays");
  // Deterministic order: sort names.
  std::vector<std::string> names;
  for (auto &kv : *to)
    names.push_back(kv.first.str());
  std::sort(names.begin(), names.end());
  for (const std::string &name : names)
    if (llvm::Error err = parseTokenArray(name, *to->get(name)))
      return err;
  return llvm::Error::success();
}

llvm::Error BatchParser::parseTokenArray(const std::string &name, Value &v) {
  Array *rows = v.getAsArray();
  if (!rows)
    return fail(file, "token." + name +
                          " must be an array of rows (one per sequence)");
  std::vector<int64_t> lens;
  std::vector<double> flat;
  for (size_t r = 0; r < rows->size(); ++r) {
    Array *row = (*rows)[r].getAsArray();
    if (!row)
      return fail(file, llvm::formatv("token.{0}[{1}] must be an array "
                                      "of numbers",
                                      name, r)
                            .str());
    for (size_t i = 0; i < row->size(); ++i) {
      auto d = number((*row)[i]);
      if (!d)
        return fail(file, llvm::formatv("token.{0}[{1}][{2}] must be a "
                                        "finite number",
                                        name, r, i)
                              .str());
      flat.push_back(*d);
    }
    lens.push_back(int64_t(row->size()));
  }
  if (lengths && *lengths != lens) {
    for (size_t r = 0; r < std::min(lens.size(), lengths->size()); ++r)
      if (lens[r] != (*lengths)[r])
        return fail(file,
                    llvm::formatv("token.{0}[{1}] has {2} tokens but "
                                  "token.{3}[{1}] has {4}",
                                  name, r, lens[r], lengthsFrom, (*lengths)[r])
                        .str());
    return fail(file,
                llvm::formatv("token.{0} has {1} sequences but "
                              "token.{2} has {3}",
                              name, lens.size(), lengthsFrom, lengths->size())
                    .str());
  }
  if (!lengths) {
    lengths = lens;
    lengthsFrom = name;
  }
  b.token[name] = std::move(flat);
  return llvm::Error::success();
}

llvm::Error BatchParser::parseSeq(Value &s) {
  Object *so = s.getAsObject();
  if (!so)
    return fail(file, "\"seq\" must be an object of arrays");
  for (auto &kv : *so) {
    std::string name = kv.first.str();
    Array *arr = kv.second.getAsArray();
    if (!arr)
      return fail(file, "seq." + name +
                            " must be an array (one value per "
                            "sequence)");
    if (numSeqs && *numSeqs != arr->size())
      return fail(file, llvm::formatv("seq.{0} has {1} values but seq.{2} "
                                      "has {3}",
                                      name, arr->size(), seqFrom, *numSeqs)
                            .str());
    numSeqs = arr->size();
    seqFrom = name;
    std::vector<double> vals;
    for (size_t i = 0; i < arr->size(); ++i) {
      if (name == "group") {
        auto g = (*arr)[i].getAsInteger();
        if (!g)
          return fail(file, llvm::formatv("seq.group[{0}] must be an "
                                          "integer prompt id",
                                          i)
                                .str());
        groupIds.push_back(*g);
        continue;
      }
      auto d = number((*arr)[i]);
      if (!d)
        return fail(file, llvm::formatv("seq.{0}[{1}] must be a finite "
                                        "number",
                                        name, i)
                              .str());
      vals.push_back(*d);
    }
    if (name != "group")
      b.seq[name] = std::move(vals);
  }
  return llvm::Error::success();
}

llvm::Error BatchParser::parseTree(Value &tv) {
  Object *tobj = tv.getAsObject();
  Array *par = tobj ? tobj->getArray("parent") : nullptr;
  Array *rows = tobj ? tobj->getArray("node") : nullptr;
  if (!par || !rows)
    return fail(file, "\"tree\" must be an object with \"parent\" (the "
                      "parent of each node, -1 for a root) and \"node\" (the "
                      "node of each token, one row per sequence)");
  if (llvm::Error err = parseTreeParents(*par))
    return err;
  for (size_t r = 0; r < rows->size(); ++r)
    if (llvm::Error err = parseTreeRow(r, (*rows)[r]))
      return err;
  return checkTreeLengths();
}

llvm::Error BatchParser::parseTreeParents(Array &par) {
  for (size_t n = 0; n < par.size(); ++n) {
    auto p = par[n].getAsInteger();
    if (!p || *p < -1 || *p >= int64_t(par.size()) || *p == int64_t(n))
      return fail(file, llvm::formatv("tree.parent[{0}] must be -1 or the "
                                      "id of another node (0..{1})",
                                      n, int64_t(par.size()) - 1)
                            .str());
    parents.push_back(*p);
  }
  if (parents.size() > size_t(INT32_MAX))
    return fail(file, "the tree has more than 2^31 nodes");
  // No cycles: every walk up reaches a root within K steps.
  for (size_t n = 0; n < parents.size(); ++n) {
    int64_t a = int64_t(n);
    for (size_t steps = 0; a >= 0 && steps <= parents.size(); ++steps)
      a = parents[size_t(a)];
    if (a >= 0)
      return fail(file, llvm::formatv("tree.parent has a cycle through "
                                      "node {0}",
                                      n)
                            .str());
  }
  return llvm::Error::success();
}

llvm::Error BatchParser::parseTreeRow(size_t r, Value &v) {
  Array *row = v.getAsArray();
  if (!row)
    return fail(file, llvm::formatv("tree.node[{0}] must be an array of "
                                    "node ids",
                                    r)
                          .str());
  std::vector<int64_t> ids;
  for (size_t i = 0; i < row->size(); ++i) {
    auto x = (*row)[i].getAsInteger();
    if (!x || *x < 0 || *x >= int64_t(parents.size()))
      return fail(file, llvm::formatv("tree.node[{0}][{1}] must be a node "
                                      "id (0..{2})",
                                      r, i, int64_t(parents.size()) - 1)
                            .str());
    ids.push_back(*x);
  }
  // A sequence is a root-to-leaf path: its tokens' nodes are the
  // ancestors of its leaf (the node of its last token), root first.
  if (!ids.empty()) {
    std::vector<int64_t> path;
    for (int64_t a = ids.back(); a >= 0; a = parents[size_t(a)])
      path.push_back(a);
    std::reverse(path.begin(), path.end());
    size_t at = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      while (at < path.size() && path[at] != ids[i])
        ++at;
      if (at == path.size())
        return fail(file,
                    llvm::formatv("tree.node[{0}][{1}] = {2} is not on the "
                                  "root-to-leaf path of sequence {0} (root "
                                  "first, ending at its last token's node {3})",
                                  r, i, ids[i], ids.back())
                        .str());
    }
  }
  nodeRows.push_back(std::move(ids));
  return llvm::Error::success();
}

llvm::Error BatchParser::checkTreeLengths() {
  std::vector<int64_t> treeLens;
  for (auto &row : nodeRows)
    treeLens.push_back(int64_t(row.size()));
  if (lengths && *lengths != treeLens) {
    size_t r = 0;
    while (r < std::min(treeLens.size(), lengths->size()) &&
           treeLens[r] == (*lengths)[r])
      ++r;
    if (r < std::min(treeLens.size(), lengths->size()))
      return fail(file,
                  llvm::formatv("tree.node[{0}] has {1} tokens but "
                                "token.{2}[{0}] has {3}",
                                r, treeLens[r], lengthsFrom, (*lengths)[r])
                      .str());
    return fail(file,
                llvm::formatv("tree.node has {0} sequences but "
                              "token.{1} has {2}",
                              treeLens.size(), lengthsFrom, lengths->size())
                    .str());
  }
  if (!lengths) {
    lengths = treeLens;
    lengthsFrom = "tree.node";
  }
  return llvm::Error::success();
}

llvm::Error BatchParser::setSeqOffsets() {
  if (lengths && numSeqs && lengths->size() != *numSeqs)
    return fail(file,
                llvm::formatv("token.{0} has {1} sequences but seq.{2} "
                              "has {3} values",
                              lengthsFrom, lengths->size(), seqFrom, *numSeqs)
                    .str());
  if (!lengths && !numSeqs)
    return fail(file, "the batch has no sequences: give \"token\" rows or "
                      "\"seq\" arrays");
  if (!lengths)
    return fail(file, "the batch has no \"token\" arrays, so the sequence "
                      "lengths are unknown; add a token input (e.g. logp)");
  b.numSeqs = int64_t(lengths->size());
  if (b.numSeqs == 0)
    return fail(file, "the batch has no sequences");
  b.seqOffsets.push_back(0);
  for (int64_t r = 0; r < b.numSeqs; ++r) {
    if ((*lengths)[r] == 0)
      return fail(file, llvm::formatv("sequence {0} has no tokens; every "
                                      "sequence needs at least one",
                                      r)
                            .str());
    if (b.seqOffsets.back() + (*lengths)[r] > INT32_MAX)
      return fail(file, "the batch has more than 2^31 tokens");
    b.seqOffsets.push_back(b.seqOffsets.back() + int32_t((*lengths)[r]));
  }
  b.numTokens = b.seqOffsets.back();
  return llvm::Error::success();
}

llvm::Error BatchParser::parseObs(Value &ov) {
  Array *rows = ov.getAsArray();
  if (!rows || int64_t(rows->size()) != b.numSeqs)
    return fail(file, llvm::formatv("\"obs\" must be an array of {0} rows "
                                    "(one per sequence) of 0/1 flags",
                                    b.numSeqs)
                          .str());
  for (int64_t r = 0; r < b.numSeqs; ++r) {
    Array *row = (*rows)[r].getAsArray();
    int64_t len = b.seqOffsets[r + 1] - b.seqOffsets[r];
    if (!row || int64_t(row->size()) != len)
      return fail(file, llvm::formatv("obs[{0}] must have one flag per "
                                      "token of sequence {0} ({1})",
                                      r, len)
                            .str());
    int64_t actions = 0;
    for (size_t i = 0; i < row->size(); ++i) {
      auto bv = (*row)[i].getAsBoolean();
      auto d = (*row)[i].getAsNumber();
      if (!bv && !(d && (*d == 0 || *d == 1)))
        return fail(file, llvm::formatv("obs[{0}][{1}] must be 0 or 1 "
                                        "(1: an observation token)",
                                        r, i)
                              .str());
      bool o = bv ? *bv : *d == 1;
      b.obs.push_back(o);
      actions += !o;
    }
    if (actions == 0)
      return fail(file, llvm::formatv("sequence {0} has only observation "
                                      "tokens; every sequence needs at "
                                      "least one action token",
                                      r)
                            .str());
  }
  return llvm::Error::success();
}

void BatchParser::setTree() {
  if (parents.empty() && nodeRows.empty())
    return;
  b.numNodes = int64_t(parents.size());
  for (int64_t p : parents)
    b.nodeParent.push_back(int32_t(p));
  for (auto &row : nodeRows)
    for (int64_t x : row)
      b.tokenNode.push_back(int32_t(x));
}

llvm::Error BatchParser::parseSeg(Value &sg) {
  Object *so = sg.getAsObject();
  if (!so)
    return fail(file, "\"seg\" must be an object of ragged arrays (one row "
                      "of segment values per sequence)");
  std::vector<std::string> names;
  for (auto &kv : *so)
    names.push_back(kv.first.str());
  std::sort(names.begin(), names.end());
  std::vector<int64_t> segLens;
  std::string segFrom;
  for (const std::string &name : names) {
    Array *rows = so->get(name)->getAsArray();
    if (!rows || int64_t(rows->size()) != b.numSeqs)
      return fail(file, llvm::formatv("seg.{0} must be an array of {1} rows "
                                      "(one per sequence)",
                                      name, b.numSeqs)
                            .str());
    std::vector<int64_t> lens;
    std::vector<double> flat;
    for (size_t r = 0; r < rows->size(); ++r) {
      Array *row = (*rows)[r].getAsArray();
      if (!row)
        return fail(file, llvm::formatv("seg.{0}[{1}] must be an array of "
                                        "numbers (one per segment)",
                                        name, r)
                              .str());
      if (int64_t(row->size()) > b.seqOffsets[r + 1] - b.seqOffsets[r])
        return fail(file, llvm::formatv("seg.{0}[{1}] has {2} segments but "
                                        "sequence {1} has only {3} tokens",
                                        name, r, row->size(),
                                        b.seqOffsets[r + 1] - b.seqOffsets[r])
                              .str());
      for (size_t i = 0; i < row->size(); ++i) {
        auto d = number((*row)[i]);
        if (!d)
          return fail(file, llvm::formatv("seg.{0}[{1}][{2}] must be a "
                                          "finite number",
                                          name, r, i)
                                .str());
        flat.push_back(*d);
      }
      lens.push_back(int64_t(row->size()));
    }
    if (!segFrom.empty() && lens != segLens) {
      size_t r = 0;
      while (lens[r] == segLens[r])
        ++r;
      return fail(file, llvm::formatv("seg.{0}[{1}] has {2} segments but "
                                      "seg.{3}[{1}] has {4}",
                                      name, r, lens[r], segFrom, segLens[r])
                            .str());
    }
    segLens = lens;
    segFrom = name;
    b.seg[name] = std::move(flat);
  }
  b.segOffsets.push_back(0);
  for (int64_t n : segLens)
    b.segOffsets.push_back(b.segOffsets.back() + int32_t(n));
  return llvm::Error::success();
}

void BatchParser::setGroups() {
  // Groups: dense ids by ascending original id; members ascending.
  if (groupIds.empty())
    groupIds.assign(size_t(b.numSeqs), 0);
  std::vector<int64_t> distinct(groupIds);
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  b.groupIds = distinct;
  b.seqGroup.resize(size_t(b.numSeqs));
  std::vector<int32_t> counts(distinct.size(), 0);
  for (int64_t s = 0; s < b.numSeqs; ++s) {
    int32_t g = int32_t(
        std::lower_bound(distinct.begin(), distinct.end(), groupIds[s]) -
        distinct.begin());
    b.seqGroup[s] = g;
    ++counts[g];
  }
  b.groupOffsets.assign(distinct.size() + 1, 0);
  for (size_t g = 0; g < distinct.size(); ++g)
    b.groupOffsets[g + 1] = b.groupOffsets[g] + counts[g];
  b.groupMembers.resize(size_t(b.numSeqs));
  std::vector<int32_t> fill(b.groupOffsets.begin(), b.groupOffsets.end() - 1);
  for (int64_t s = 0; s < b.numSeqs; ++s)
    b.groupMembers[fill[b.seqGroup[s]]++] = int32_t(s);
}

} // namespace

llvm::Expected<Batch> cac::parseBatchJson(llvm::StringRef text,
                                          llvm::StringRef file) {
  auto parsed = llvm::json::parse(text);
  if (!parsed)
    return fail(file, "invalid JSON: " + llvm::toString(parsed.takeError()));
  Object *root = parsed->getAsObject();
  if (!root)
    return fail(file, "the batch must be a JSON object with \"token\" and/or "
                      "\"seq\" members");
  BatchParser p;
  p.file = file;
  if (llvm::Error err = p.checkMembers(*root))
    return std::move(err);
  if (Value *v = root->get("params"))
    if (llvm::Error err = p.parseParams(*v))
      return std::move(err);
  if (Value *v = root->get("token"))
    if (llvm::Error err = p.parseToken(*v))
      return std::move(err);
  if (Value *v = root->get("seq"))
    if (llvm::Error err = p.parseSeq(*v))
      return std::move(err);
  if (Value *v = root->get("tree"))
    if (llvm::Error err = p.parseTree(*v))
      return std::move(err);
  if (llvm::Error err = p.setSeqOffsets())
    return std::move(err);
  if (Value *v = root->get("obs"))
    if (llvm::Error err = p.parseObs(*v))
      return std::move(err);
  p.setTree();
  if (Value *v = root->get("seg"))
    if (llvm::Error err = p.parseSeg(*v))
      return std::move(err);
  p.setGroups();
  return std::move(p.b);
}

llvm::Error cac::checkSegmentCounts(const Batch &b,
                                    const std::vector<OutputArray> &outputs) {
  if (b.seg.empty())
    return llvm::Error::success();
  for (const OutputArray &o : outputs) {
    if (o.name != "_seg_start")
      continue;
    for (int64_t s = 0; s < b.numSeqs; ++s) {
      int64_t n = 0;
      for (int32_t t = b.seqOffsets[s]; t < b.seqOffsets[s + 1]; ++t)
        n += o.values[t] != 0;
      int64_t given = b.segOffsets[s + 1] - b.segOffsets[s];
      if (n != given)
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            llvm::formatv("seg.{0}[{1}] has {2} segment values but the "
                          "estimator's segments split sequence {1} into {3}",
                          b.seg.begin()->first(), s, given, n)
                .str());
    }
  }
  return llvm::Error::success();
}

Batch cac::actionsOnly(const Batch &full) {
  if (full.obs.empty())
    return full;
  Batch b = full;
  b.obs.clear();
  auto keep = [&](const std::vector<double> &v) {
    std::vector<double> out;
    for (int64_t t = 0; t < full.numTokens; ++t)
      if (!full.obs[t])
        out.push_back(v[t]);
    return out;
  };
  for (auto &kv : b.token)
    kv.second = keep(full.token.lookup(kv.first()));
  if (!full.tokenNode.empty()) {
    b.tokenNode.clear();
    for (int64_t t = 0; t < full.numTokens; ++t)
      if (!full.obs[t])
        b.tokenNode.push_back(full.tokenNode[t]);
  }
  b.seqOffsets.assign(1, 0);
  for (int64_t s = 0; s < full.numSeqs; ++s) {
    int32_t n = 0;
    for (int32_t t = full.seqOffsets[s]; t < full.seqOffsets[s + 1]; ++t)
      n += !full.obs[t];
    b.seqOffsets.push_back(b.seqOffsets.back() + n);
  }
  b.numTokens = b.seqOffsets.back();
  return b;
}

void cac::expandToFull(const Batch &full, std::vector<OutputArray> &outputs) {
  if (full.obs.empty())
    return;
  for (OutputArray &o : outputs) {
    if (o.domain != "token" && o.domain != "seg")
      continue;
    std::vector<double> v(full.numTokens, 0.0);
    size_t k = 0;
    for (int64_t t = 0; t < full.numTokens; ++t)
      if (!full.obs[t])
        v[t] = o.values[k++];
    o.values = std::move(v);
  }
}

double cac::objectiveNormalizer(const ObjectiveInfo &info, int aggregation,
                                const std::vector<double> &lossCount) {
  if (info.lossDomain == "seq" || aggregation == 0) {
    double n = 0;
    for (double c : lossCount)
      n += c;
    return n;
  }
  // The seq-mean modes divide by B, the sequences with an element that
  // counts: verl's agg_loss leaves fully masked sequences out of its
  // seq-mean (seq_mask). seq-mean-token-sum-norm's 1 / L is applied in the
  // kernel: (1/B) sum_i sum_t w l / L, as verl's (the seq-mean, then
  // / loss_scale_factor).
  double n = 0;
  for (double c : lossCount)
    n += c > 0 ? 1.0 : 0.0;
  return n;
}

llvm::Expected<std::string>
cac::finishObjective(const ObjectiveInfo &info, int aggregation,
                     const Batch &batch, std::vector<OutputArray> &outputs) {
  auto find = [&](llvm::StringRef name) -> OutputArray * {
    for (OutputArray &o : outputs)
      if (o.name == name)
        return &o;
    return nullptr;
  };
  OutputArray *loss = find("loss"), *count = find("loss_count"),
              *grad = find("grad_" + info.wrt);
  if (!loss || !count || !grad)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the objective's outputs loss, loss_count "
                                   "and grad_" + info.wrt + " are missing");
  double n = objectiveNormalizer(info, aggregation, count->values);
  double sum = 0;
  for (double v : loss->values)
    sum += v;
  // Nothing counts (every element masked out): the loss and its gradient
  // are 0, as verl's masked mean with its clamp of the denominator.
  double scale = n > 0 ? 1.0 / n : 0.0;
  for (double &g : grad->values)
    g *= scale;
  static const char *const modes[] = {"token-mean", "seq-mean-token-mean",
                                      "seq-mean-token-sum",
                                      "seq-mean-token-sum-norm"};
  Object o;
  o["wrt"] = info.wrt;
  o["aggregation"] = info.lossDomain == "seq" ? "seq-mean"
                     : aggregation >= 0 && aggregation < 4
                         ? modes[aggregation]
                         : "?";
  o["normalizer"] = n;
  // A non-finite loss prints as null (JSON has no NaN); the loss outputs
  // that made it are reported by formatOutputsJson.
  double value = sum * scale;
  o["loss"] = std::isfinite(value) ? Value(value) : Value(nullptr);
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::formatv("{0:2}", Value(std::move(o)));
  return os.str();
}

llvm::Expected<std::vector<double>> cac::resolveParams(
    const Batch &batch,
    const std::vector<std::pair<std::string, std::optional<double>>>
        &declared) {
  std::vector<double> values;
  for (auto &[name, def] : declared) {
    auto it = batch.params.find(name);
    if (it != batch.params.end())
      values.push_back(it->second);
    else if (def)
      values.push_back(*def);
    else
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "parameter '" + name +
              "' has no default and no value: give it with --param " + name +
              "=VALUE or in the batch's \"params\"");
  }
  for (auto &kv : batch.params) {
    bool known = std::any_of(declared.begin(), declared.end(),
                             [&](auto &d) { return d.first == kv.first; });
    if (!known) {
      std::string list;
      for (auto &d : declared)
        list += (list.empty() ? "" : ", ") + d.first;
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "unknown parameter '" + kv.first + "'; the estimator declares: " +
              (list.empty() ? std::string("none") : list));
    }
  }
  return values;
}
