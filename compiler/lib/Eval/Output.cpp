//===- Output.cpp - The JSON that `cac eval` prints -----------------------===//

#include "cac/Eval/Output.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <cmath>

using namespace cac;
using llvm::json::Array;
using llvm::json::Object;
using llvm::json::Value;

namespace {

/// Turns output values into JSON numbers, null where not finite, and keeps
/// the list of those.
class Numbers {
public:
  explicit Numbers(std::vector<NonFinite> *nonFinite) : nonFinite(nonFinite) {}

  Value at(double v, const llvm::Twine &where) {
    if (std::isfinite(v))
      return v;
    if (nonFinite)
      nonFinite->push_back({where.str(), v});
    return nullptr;
  }

  Array array(const OutputArray &o) {
    Array a;
    for (size_t i = 0; i < o.values.size(); ++i)
      a.push_back(at(o.values[i], o.domain + "." + o.name + "[" +
                                      llvm::Twine(i) + "]"));
    return a;
  }

  /// One row per sequence of the values on its tokens where `take` says so
  /// (every token without it).
  Array rows(const Batch &b, const OutputArray &o, const char *domain,
             const OutputArray *take) {
    Array rows;
    for (int64_t s = 0; s < b.numSeqs; ++s) {
      Array row;
      for (int32_t t = b.seqOffsets[s]; t < b.seqOffsets[s + 1]; ++t)
        if (!take || take->values[t] != 0)
          row.push_back(at(o.values[t], llvm::Twine(domain) + "." + o.name +
                                            "[" + llvm::Twine(s) + "][" +
                                            llvm::Twine(row.size()) + "]"));
      rows.push_back(std::move(row));
    }
    return rows;
  }

private:
  std::vector<NonFinite> *nonFinite;
};

Array segmentStarts(const Batch &b, const OutputArray &starts) {
  Array segs;
  for (int64_t s = 0; s < b.numSeqs; ++s) {
    Array row;
    for (int32_t t = b.seqOffsets[s]; t < b.seqOffsets[s + 1]; ++t)
      if (starts.values[t] != 0)
        row.push_back(int64_t(t - b.seqOffsets[s]));
    segs.push_back(std::move(row));
  }
  return segs;
}

} // namespace

std::string cac::formatOutputsJson(const Batch &b,
                                   const std::vector<OutputArray> &outputs,
                                   llvm::StringRef objectiveJson,
                                   std::vector<NonFinite> *nonFinite) {
  Numbers num(nonFinite);
  Object token, seq, group, segObj, nodeObj;
  // The segment starts (output "_seg_start", 1 where a segment starts).
  const OutputArray *starts = nullptr;
  for (const OutputArray &o : outputs)
    if (o.name == "_seg_start" && o.domain == "token")
      starts = &o;
  for (const OutputArray &o : outputs) {
    if (&o == starts)
      continue;
    if (o.domain == "seg" && starts)
      // One value per segment: the value on the segment's first token.
      segObj[o.name] = num.rows(b, o, "seg", starts);
    else if (o.domain == "token")
      token[o.name] = num.rows(b, o, "token", nullptr);
    else if (o.domain == "seq")
      seq[o.name] = num.array(o);
    else if (o.domain == "node")
      nodeObj[o.name] = num.array(o);
    else if (o.domain == "group")
      group[o.name] = num.array(o);
  }
  Object root;
  root["token"] = std::move(token);
  root["seq"] = std::move(seq);
  root["group"] = std::move(group);
  if (!nodeObj.empty())
    root["node"] = std::move(nodeObj);
  Array ids;
  for (int64_t id : b.groupIds)
    ids.push_back(id);
  root["groups"] = std::move(ids);
  if (starts) {
    root["seg"] = std::move(segObj);
    root["segments"] = segmentStarts(b, *starts);
  }
  if (!objectiveJson.empty())
    if (auto v = llvm::json::parse(objectiveJson))
      root["objective"] = std::move(*v);
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::formatv("{0:2}", Value(std::move(root))) << "\n";
  return os.str();
}

std::string cac::describeNonFinite(const std::vector<NonFinite> &nonFinite) {
  constexpr size_t kShown = 5;
  std::string s;
  llvm::raw_string_ostream os(s);
  os << nonFinite.size() << " output value"
     << (nonFinite.size() == 1 ? " is" : "s are")
     << " not finite, printed as null:";
  for (size_t i = 0; i < nonFinite.size() && i < kShown; ++i)
    os << (i ? ", " : " ") << nonFinite[i].where << " = "
       << (std::isnan(nonFinite[i].value) ? "nan"
           : nonFinite[i].value > 0       ? "inf"
                                          : "-inf");
  if (nonFinite.size() > kShown)
    os << ", ...";
  return os.str();
}
