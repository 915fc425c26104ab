//===- TrainFileTools.cpp - The `tools` field of a training file ----------===//

#include "TrainFileChecker.h"

namespace cac::rt::train::schema {

namespace {

constexpr const char *kForms =
    "none, calculator(max_turns = 3, open = \"<calc>\", close = \"</calc>\", "
    "result_open = \"<r>\", result_close = \"</r>\") or command(\"PROGRAM "
    "ARGS\", timeout = 10, start_timeout = 60, max_bytes = 65536, max_turns "
    "= 3, open = .., close = .., result_open = .., result_close = ..)";

/// command(..)'s own arguments: the program and its limits.
bool parseCommandArgs(Checker &c, Args &a, ToolSpec &t) {
  if (!a.require("cmd"))
    return false;
  a.str("cmd", t.command);
  a.num("timeout", t.timeout, 0.0, 86400.0, true);
  a.num("start_timeout", t.startTimeout, 0.0, 86400.0, true);
  a.integer("max_bytes", t.maxBytes, 1, int64_t(1) << 24);
  if (a.ok() && t.command.find_first_not_of(" \t\n") == std::string::npos) {
    c.diag().error(a.get("cmd")->loc,
                   "the tool command is empty: give the program and its "
                   "arguments, e.g. command(\"python3 tool.py\")");
    return false;
  }
  return a.ok();
}

} // namespace

bool parseTools(Checker &c, const Value &v, ToolSpec &t) {
  t.loc = v.loc;
  if (v.kind == Value::Kind::Name && v.text == "none") {
    t.maxTurns = 0;
    return true;
  }
  bool command = isCall(v, "command");
  if (!command && !isCall(v, "calculator")) {
    c.expected(v, "'tools'", kForms);
    return false;
  }
  std::vector<std::string> known = {"max_turns", "open", "close", "result_open",
                                    "result_close"};
  if (command)
    known.insert(known.begin(),
                 {"cmd", "timeout", "start_timeout", "max_bytes"});
  Args a(c, v, known,
         command ? std::vector<std::string>{"cmd"}
                 : std::vector<std::string>{});
  t.kind = command ? ToolSpec::Kind::Command : ToolSpec::Kind::Calculator;
  t.maxTurns = 3;
  a.integer("max_turns", t.maxTurns, 1, 1024);
  a.str("open", t.syntax.open);
  a.str("close", t.syntax.close);
  a.str("result_open", t.syntax.resultOpen);
  a.str("result_close", t.syntax.resultClose);
  if (command && !parseCommandArgs(c, a, t))
    return false;
  if (!a.ok())
    return false;
  const std::string tool = command ? "tool command" : "calculator";
  for (const char *tag : {"open", "close"}) {
    const std::string &s = tag[0] == 'o' ? t.syntax.open : t.syntax.close;
    if (s.empty()) {
      c.diag().error(a.get(tag)->loc, "the " + tool + "'s '" +
                                          std::string(tag) +
                                          "' tag must not be empty");
      return false;
    }
  }
  return true;
}

} // namespace cac::rt::train::schema
