//===- ToolUse.h - The tools of multi-turn rollouts -------------*- C++ -*-===//
//
// `tools = calculator(..)` of a training file, as the Decoder's tool hook:
// after each sampled token it looks for a call that the token closes (in the
// text since the row's last observation), evaluates it (Calculator.h) and
// replies with the result's tokens, which the decoder appends as
// observation tokens (docs/training.md, "Tool use").
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TRAIN_TOOLUSE_H
#define CAC_RUNTIME_TRAIN_TOOLUSE_H

#include "cac/Runtime/Model/Generation.h"
#include "cac/Runtime/Train/TrainFile.h"

#include <string>

namespace cac::rt::train {

/// The calculator of \p spec for a decoder (SamplingOptions::tool): a closed
/// call with an opening tag is evaluated, its result (or `error`) between
/// the result tags is the reply; a closing tag without an opening one is an
/// error reply; a call after the spec.maxTurns-th is not answered (no
/// observation, a failed call). \p tokenizer must outlive the hook.
ToolHook calculatorTool(const Tokenizer &tokenizer, const ToolSpec &spec);

/// Why \p tokenizer cannot write the calculator's replies (its result tags,
/// digits, `-` and `error`); empty when it can.
std::string checkToolTokens(const Tokenizer &tokenizer, const ToolSpec &spec);

} // namespace cac::rt::train

#endif // CAC_RUNTIME_TRAIN_TOOLUSE_H
