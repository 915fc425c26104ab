//===- Output.h - The JSON that `cac eval` prints ---------------*- C++ -*-===//
//
// The outputs of one run as JSON: ragged token rows, one value per segment,
// seq, node and group values (groups in ascending id order, the ids under
// "groups"). JSON has no NaN or infinity, so a non-finite value prints as
// null and is listed for a note on stderr.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_EVAL_OUTPUT_H
#define CAC_EVAL_OUTPUT_H

#include "cac/Eval/Batch.h"

#include <string>
#include <vector>

namespace cac {

/// One output value that is not finite: where it is (`token.adv[3][2]`,
/// `seq.value[1]`) and what it is.
struct NonFinite {
  std::string where;
  double value;
};

/// The JSON of `cac eval`; `objectiveJson`, when not empty, is printed under
/// "objective". Each non-finite value prints as null and is appended to
/// `nonFinite` when given.
std::string formatOutputsJson(const Batch &batch,
                              const std::vector<OutputArray> &outputs,
                              llvm::StringRef objectiveJson = "",
                              std::vector<NonFinite> *nonFinite = nullptr);

/// A one-paragraph note on the non-finite values: how many, and the first few
/// with their places and values.
std::string describeNonFinite(const std::vector<NonFinite> &nonFinite);

} // namespace cac

#endif // CAC_EVAL_OUTPUT_H
