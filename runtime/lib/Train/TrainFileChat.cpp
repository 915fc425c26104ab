//===- TrainFileChat.cpp - The `chat` field of a training file ------------===//
//
//   chat = none | false | true | template("FOLDER", system = "TEXT",
//                                         NAME = value, ...)
//
// `true` is template() with the model's tokenizer folder. Other keyword
// arguments become variables of the template (numbers, strings, true,
// false, none), e.g. Qwen3's `enable_thinking = false`. The template itself
// is read when the run starts (TaskSource), so that `--check` reports it at
// this field too.
//
//===----------------------------------------------------------------------===//

#include "TrainFileChecker.h"

#include <nlohmann/json.hpp>

#include <cmath>

namespace cac::rt::train::schema {

namespace {

/// A template variable's value as JSON text; reports and returns nothing
/// for values a template cannot take.
std::optional<std::string> variableJson(Checker &c, const Value &v,
                                        const std::string &name) {
  switch (v.kind) {
  case Value::Kind::Number:
    if (v.number == std::floor(v.number) && std::fabs(v.number) < 9.0e15)
      return std::to_string(static_cast<int64_t>(v.number));
    return nlohmann::json(v.number).dump();
  case Value::Kind::String:
    return nlohmann::json(v.text).dump();
  case Value::Kind::Name:
    if (v.text == "true" || v.text == "false")
      return v.text;
    if (v.text == "none")
      return std::string("null");
    break;
  case Value::Kind::Call:
    break;
  }
  c.diag().error(v.loc, "template variable '" + name +
                            "' must be a number, a string, true, false or "
                            "none, got " +
                            v.kindName() + " '" + v.spelling() + "'");
  return std::nullopt;
}

} // namespace

bool parseChat(Checker &c, const Value &v, ChatSpec &chat) {
  chat.loc = v.loc;
  if (c.isNone(v) || (v.kind == Value::Kind::Name &&
                      (v.text == "false" || v.text == "true"))) {
    chat.enabled = v.text == "true";
    return true;
  }
  if (isCall(v, "template")) {
    Args a(c, v, {"folder", "system"}, {"folder"}, /*allowUnknown=*/true);
    a.path("folder", chat.folder);
    a.str("system", chat.system);
    bool ok = a.ok();
    for (const auto &x : a.extra()) {
      if (x.key == "messages" || x.key == "add_generation_prompt") {
        c.diag().error(x.loc, "'" + x.key +
                                  "' is set by cac-run for every prompt, "
                                  "not a template variable of the file");
        ok = false;
        continue;
      }
      if (auto json = variableJson(c, *x.value, x.key))
        chat.variables.emplace_back(x.key, *json);
      else
        ok = false;
    }
    chat.enabled = ok;
    return ok;
  }
  c.expected(v, "'chat'",
             "none, true (the model's tokenizer folder's chat template) or "
             "template(\"FOLDER\", system = \"TEXT\", NAME = value, ...)");
  return false;
}

} // namespace cac::rt::train::schema
