//===- TrainFileTools.cpp - The `tools` field of a training file ----------===//

#include "TrainFileChecker.h"

namespace cac::rt::train::schema {

bool parseTools(Checker &c, const Value &v, ToolSpec &t) {
  t.loc = v.loc;
  if (v.kind == Value::Kind::Name && v.text == "none") {
    t.maxTurns = 0;
    return true;
  }
  if (!isCall(v, "calculator")) {
    c.expected(v, "'tools'",
               "none or calculator(max_turns = 3, open = \"<calc>\", close = "
               "\"</calc>\", result_open = \"<r>\", result_close = \"</r>\")");
    return false;
  }
  Args a(c, v, {"max_turns", "open", "close", "result_open", "result_close"});
  t.maxTurns = 3;
  a.integer("max_turns", t.maxTurns, 1, 1024);
  a.str("open", t.syntax.open);
  a.str("close", t.syntax.close);
  a.str("result_open", t.syntax.resultOpen);
  a.str("result_close", t.syntax.resultClose);
  if (!a.ok())
    return false;
  for (const char *tag : {"open", "close"}) {
    const std::string &s = tag[0] == 'o' ? t.syntax.open : t.syntax.close;
    if (s.empty()) {
      c.diag().error(a.get(tag)->loc, "the calculator's '" + std::string(tag) +
                                          "' tag must not be empty");
      return false;
    }
  }
  return true;
}

} // namespace cac::rt::train::schema
