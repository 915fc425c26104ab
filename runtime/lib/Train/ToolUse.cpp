//===- ToolUse.cpp - The tools of multi-turn rollouts ---------------------===//

#include "cac/Runtime/Train/ToolUse.h"

#include "cac/Runtime/Tasks/Calculator.h"

#include <iostream>
#include <memory>

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

/// The call that \p row's last token closes, if any.
std::optional<ClosedCall> closedCall(const Tokenizer &tok,
                                     const ToolSyntax &syntax,
                                     const GeneratedSequence &row) {
  if (row.tokens.empty() || row.isObservation(row.tokens.size() - 1))
    return std::nullopt;
  // Only a token whose text holds the closing tag's last character can
  // end a call: the common token costs one decode of one id.
  if (decodeKnown(tok, {row.tokens.back()}).find(syntax.close.back()) ==
      std::string::npos)
    return std::nullopt;
  std::vector<int64_t> turn = turnTokens(row);
  std::string text = decodeKnown(tok, turn);
  turn.pop_back();
  return findClosedCall(text, decodeKnown(tok, turn).size(), syntax);
}

constexpr const char *kUnopened = "a closing tag without an opening one";

/// A reply to each call a row's last token closes, as the tool \p answer
/// gives it; no reply where no call closes, and an empty one (no
/// observation) once the row has made the spec's max_turns calls.
template <typename Answer>
ToolHook answeringCalls(const Tokenizer &tokenizer, const ToolSpec &spec,
                        Answer answer) {
  const Tokenizer *tok = &tokenizer;
  ToolSyntax syntax = spec.syntax;
  int64_t maxTurns = spec.maxTurns;
  return [tok, syntax, maxTurns,
          answer](const GeneratedSequence &row) -> std::optional<ToolReply> {
    std::optional<ClosedCall> call = closedCall(*tok, syntax, row);
    if (!call)
      return std::nullopt;
    if (row.toolCalls >= maxTurns)
      return ToolReply(); // past the turn limit: not answered
    return answer(*call, row);
  };
}

} // namespace

ToolHook calculatorTool(const Tokenizer &tokenizer, const ToolSpec &spec) {
  const Tokenizer *tok = &tokenizer;
  ToolSyntax syntax = spec.syntax;
  return answeringCalls(
      tokenizer, spec,
      [tok, syntax](const ClosedCall &call, const GeneratedSequence &) {
        CalculatorResult result;
        if (call.opened)
          result = evaluateCalculator(call.expression);
        else
          result.error = kUnopened;
        ToolReply reply;
        reply.ok = result.value.has_value();
        reply.observation =
            tok->encode(calculatorObservation(result, syntax), false);
        return reply;
      });
}

std::vector<int64_t> toolAnswerTokens(const Tokenizer &tokenizer,
                                      const ToolSyntax &syntax,
                                      ToolAnswer &answer) {
  try {
    return tokenizer.encode(
        syntax.resultOpen + answer.observation + syntax.resultClose, false);
  } catch (const std::exception &) {
    // A program that prints what a policy's call computed may print text
    // the tokenizer cannot write: a failed call, not a failed run.
    answer.ok = false;
    answer.failure = "a reply the tokenizer cannot write";
    answer.observation = ToolCommand::failureObservation(answer.failure);
    return tokenizer.encode(
        syntax.resultOpen + answer.observation + syntax.resultClose, false);
  }
}

ToolHook commandTool(const Tokenizer &tokenizer, const ToolSpec &spec,
                     ToolCommand &tool, std::string where) {
  const Tokenizer *tok = &tokenizer;
  ToolCommand *program = &tool;
  ToolSyntax syntax = spec.syntax;
  auto warned = std::make_shared<bool>(false);
  return answeringCalls(
      tokenizer, spec,
      [tok, program, syntax, where, warned](const ClosedCall &call,
                                            const GeneratedSequence &row) {
        ToolAnswer answer;
        if (!call.opened) {
          answer.observation = ToolCommand::failureObservation(kUnopened);
        } else {
          try {
            answer = program->call(call.expression, row.toolCalls + 1,
                                   decodeKnown(*tok, row.prompt));
          } catch (const std::exception &e) {
            throw std::runtime_error(where + ": " + e.what());
          }
        }
        ToolReply reply;
        reply.observation = toolAnswerTokens(*tok, syntax, answer);
        reply.ok = answer.ok;
        reply.failed = !answer.failure.empty();
        // The first failed call of the run: a program that failed before has
        // been started again since (a hook is made per sampling pass, so its
        // own flag only covers the pass).
        if (reply.failed && !*warned && program->restarts() == 0) {
          *warned = true;
          std::cerr
              << "cac-run: warning: " << where << ": tool command '"
              << program->options().command << "' failed on a call ("
              << answer.failure << "); the policy sees '" << answer.observation
              << "' and the program is started again for the next call; "
                 "metric tool_failures counts such calls (this warning is "
                 "printed once)\n";
        }
        return reply;
      });
}

std::string checkToolTokens(const Tokenizer &tokenizer, const ToolSpec &spec) {
  const ToolSyntax &s = spec.syntax;
  bool command = spec.kind == ToolSpec::Kind::Command;
  std::string replies =
      command ? s.resultOpen +
                    ToolCommand::failureObservation("no reply within 1.5 s") +
                    s.resultClose
              : s.resultOpen + "-0123456789error" + s.resultClose;
  for (const std::string &text : {s.open, s.close, replies}) {
    try {
      tokenizer.encode(text, false);
    } catch (const std::exception &e) {
      return std::string("the tokenizer cannot write the ") +
             (command ? "tool command's" : "calculator's") + " '" + text +
             "': " + e.what();
    }
  }
  return "";
}

} // namespace cac::rt::train
