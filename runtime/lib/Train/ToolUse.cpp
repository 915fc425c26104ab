//===- ToolUse.cpp - The tools of multi-turn rollouts ---------------------===//

#include "cac/Runtime/Train/ToolUse.h"

#include "cac/Runtime/Tasks/Calculator.h"

namespace cac::rt::train {

namespace {

/// The generated tokens of \p row since its last observation token.
std::vector<int64_t> turnTokens(const GeneratedSequence &row) {
  size_t start = 0;
  for (size_t t = row.observation.size(); t > 0; --t)
    if (row.observation[t - 1] != 0) {
      start = t;
      break;
    }
  return std::vector<int64_t>(row.tokens.begin() + start, row.tokens.end());
}

} // namespace

ToolHook calculatorTool(const Tokenizer &tokenizer, const ToolSpec &spec) {
  const Tokenizer *tok = &tokenizer;
  ToolSyntax syntax = spec.syntax;
  int64_t maxTurns = spec.maxTurns;
  return [tok, syntax,
          maxTurns](const GeneratedSequence &row) -> std::optional<ToolReply> {
    if (row.tokens.empty() || row.isObservation(row.tokens.size() - 1))
      return std::nullopt;
    // Only a token whose text holds the closing tag's last character can
    // end a call: the common token costs one decode of one id.
    if (decodeKnown(*tok, {row.tokens.back()}).find(syntax.close.back()) ==
        std::string::npos)
      return std::nullopt;
    std::vector<int64_t> turn = turnTokens(row);
    std::string text = decodeKnown(*tok, turn);
    turn.pop_back();
    std::optional<ClosedCall> call =
        findClosedCall(text, decodeKnown(*tok, turn).size(), syntax);
    if (!call)
      return std::nullopt;
    ToolReply reply;
    if (row.toolCalls >= maxTurns)
      return reply; // past the turn limit: not answered
    CalculatorResult result;
    if (call->opened)
      result = evaluateCalculator(call->expression);
    else
      result.error = "a closing tag without an opening one";
    reply.ok = result.value.has_value();
    reply.observation =
        tok->encode(calculatorObservation(result, syntax), false);
    return reply;
  };
}

std::string checkToolTokens(const Tokenizer &tokenizer, const ToolSpec &spec) {
  const ToolSyntax &s = spec.syntax;
  for (const std::string &text :
       {s.open, s.close, s.resultOpen + "-0123456789error" + s.resultClose}) {
    try {
      tokenizer.encode(text, false);
    } catch (const std::exception &e) {
      return "the tokenizer cannot write the calculator's '" + text +
             "': " + e.what();
    }
  }
  return "";
}

} // namespace cac::rt::train
