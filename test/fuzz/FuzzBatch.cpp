//===- FuzzBatch.cpp - libFuzzer target over the batch JSON reader --------===//
//
// cac-fuzz-batch: feeds arbitrary bytes to what `cac eval --input FILE` does
// with a batch before it runs an estimator: parseBatchJson (JSON, the
// members, params, token/seq/seg arrays, groups, the tree, observation
// tokens), then for a batch that parses, actionsOnly (the estimator's view
// without observation tokens) and expandToFull (outputs put back on every
// token). Errors are llvm::Errors naming the file and member; a crash, a
// sanitizer report, an LLVM fatal error or a hang is a bug, and so is a
// batch that parses with arrays whose sizes disagree (the kernels index them
// with no further check).
//
//===----------------------------------------------------------------------===//

#include "cac/Eval/Batch.h"

#include "llvm/Support/Error.h"

#include <cstdint>

using namespace cac;

namespace {

void require(bool ok) {
  if (!ok)
    __builtin_trap();
}

/// What the kernels rely on: every packed array has the length its domain
/// says and every index is in range.
void checkShape(const Batch &b) {
  require(b.numSeqs >= 0 && b.numTokens >= 0);
  require(int64_t(b.seqOffsets.size()) == b.numSeqs + 1);
  require(b.seqOffsets.front() == 0 && b.seqOffsets.back() == b.numTokens);
  for (int64_t s = 0; s < b.numSeqs; ++s)
    require(b.seqOffsets[s] <= b.seqOffsets[s + 1]);
  for (const auto &kv : b.token)
    require(int64_t(kv.second.size()) == b.numTokens);
  for (const auto &kv : b.seq)
    require(int64_t(kv.second.size()) == b.numSeqs);
  require(int64_t(b.seqGroup.size()) == b.numSeqs);
  require(int64_t(b.groupOffsets.size()) == b.numGroups() + 1);
  require(int64_t(b.groupMembers.size()) == b.numSeqs);
  for (int32_t g : b.seqGroup)
    require(g >= 0 && g < b.numGroups());
  require(b.obs.empty() || int64_t(b.obs.size()) == b.numTokens);
  if (!b.tokenNode.empty()) {
    require(int64_t(b.tokenNode.size()) == b.numTokens);
    require(int64_t(b.nodeParent.size()) == b.numNodes);
    for (int32_t n : b.tokenNode)
      require(n >= 0 && n < b.numNodes);
    for (int32_t p : b.nodeParent)
      require(p >= -1 && p < b.numNodes);
  }
  if (!b.seg.empty()) {
    require(int64_t(b.segOffsets.size()) == b.numSeqs + 1);
    for (const auto &kv : b.seg)
      require(int64_t(kv.second.size()) == b.segOffsets.back());
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  llvm::Expected<Batch> batch = parseBatchJson(text, "fuzz.json");
  if (!batch) {
    std::string message = llvm::toString(batch.takeError());
    require(!message.empty());
    return 0;
  }
  checkShape(*batch);
  Batch actions = actionsOnly(*batch);
  checkShape(actions);
  std::vector<OutputArray> outputs;
  outputs.push_back({"adv", "token",
                     std::vector<double>(size_t(actions.numTokens), 1.0)});
  outputs.push_back(
      {"v", "seq", std::vector<double>(size_t(actions.numSeqs), 1.0)});
  expandToFull(*batch, outputs);
  require(int64_t(outputs[0].values.size()) == batch->numTokens);
  return 0;
}
