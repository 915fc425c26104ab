//===- Turns.cpp - Turn starts of multi-turn batches ----------------------===//

#include "cac/Eval/Turns.h"

using namespace cac;

void cac::addTurnStarts(const Batch &full, Batch &actions) {
  if (actions.token.count("turn_start"))
    return;
  std::vector<double> starts;
  starts.reserve(actions.numTokens);
  for (int64_t s = 0; s < full.numSeqs; ++s) {
    // An observation before the sequence's first action starts no extra
    // turn: the first action starts one anyway.
    bool afterObs = true;
    for (int32_t t = full.seqOffsets[s]; t < full.seqOffsets[s + 1]; ++t) {
      bool isObs = !full.obs.empty() && full.obs[t];
      if (!isObs)
        starts.push_back(afterObs ? 1.0 : 0.0);
      afterObs = isObs;
    }
  }
  actions.token["turn_start"] = std::move(starts);
}
