//===- ToolUse.h - The tools of multi-turn rollouts -------------*- C++ -*-===//
//
// `tools = calculator(..)` and `tools = command(..)` of a training file, as
// the Decoder's tool hook: after each sampled token it looks for a call that
// the token closes (in the text since the row's last observation), evaluates
// it (Calculator.h) or asks the tool program (ToolCommand.h), and replies
// with the result's tokens, which the decoder appends as observation tokens
// (docs/training.md, "Tool use").
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TRAIN_TOOLUSE_H
#define CAC_RUNTIME_TRAIN_TOOLUSE_H

#include "cac/Runtime/Model/Generation.h"
#include "cac/Runtime/Tasks/ToolCommand.h"
#include "cac/Runtime/Train/TrainFile.h"

#include <string>

namespace cac::rt::train {

/// The calculator of \p spec for a decoder (SamplingOptions::tool): a closed
/// call with an opening tag is evaluated, its result (or `error`) between
/// the result tags is the reply; a closing tag without an opening one is an
/// error reply; a call after the spec.maxTurns-th is not answered (no
/// observation, a failed call). \p tokenizer must outlive the hook.
ToolHook calculatorTool(const Tokenizer &tokenizer, const ToolSpec &spec);

/// The tool program \p tool for a decoder: as calculatorTool, but the text
/// of a call goes to the program (with the call's number in its row and the
/// row's prompt) and its observation between the result tags is the reply;
/// a call the program failed on is a failed reply (ToolReply::failed) whose
/// observation says why, and the first one of a run is reported on the
/// standard error. A program that breaks the protocol or cannot start again
/// throws, naming \p where (the training file's `tools` field,
/// FILE:LINE:COL). \p tokenizer and \p tool must outlive the hook.
ToolHook commandTool(const Tokenizer &tokenizer, const ToolSpec &spec,
                     ToolCommand &tool, std::string where);

/// The observation tokens of \p answer: its observation between the result
/// tags, or, where \p tokenizer cannot write it, a failed answer saying so.
std::vector<int64_t> toolAnswerTokens(const Tokenizer &tokenizer,
                                      const ToolSyntax &syntax,
                                      ToolAnswer &answer);

/// Why \p tokenizer cannot write the tool's replies (the calculator's result
/// tags, digits, `-` and `error`; a tool program's result tags and failure
/// observations); empty when it can.
std::string checkToolTokens(const Tokenizer &tokenizer, const ToolSpec &spec);

} // namespace cac::rt::train

#endif // CAC_RUNTIME_TRAIN_TOOLUSE_H
