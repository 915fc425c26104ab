//===- Turns.h - Turn starts of multi-turn batches --------------*- C++ -*-===//
//
// The token field `turn_start` that the language's `turn_start` built-in
// reads (docs/language.md, "Observation tokens"): in a multi-turn rollout a
// turn is a span of action tokens between observations.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_EVAL_TURNS_H
#define CAC_EVAL_TURNS_H

#include "cac/Eval/Batch.h"

namespace cac {

/// Gives `actions` (actionsOnly(full), or `full` itself without
/// observations) the token array "turn_start" unless the batch has one: 1 on
/// the first token of each sequence and on each action token that follows an
/// observation token of `full`, 0 elsewhere.
void addTurnStarts(const Batch &full, Batch &actions);

} // namespace cac

#endif // CAC_EVAL_TURNS_H
