//===- ChatTemplateBuiltins.cpp - Filters, tests, methods, globals --------===//
//
// Each behaves as Jinja2's (and Hugging Face's `tojson` and
// `raise_exception`) on the values a chat template meets: strings, numbers,
// lists and mappings from JSON messages.
//
//===----------------------------------------------------------------------===//

#include "ChatTemplateBuiltins.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace cac::rt::chat {

namespace {

const std::vector<std::string_view> kFilters = {
    "abs",    "count",      "d",          "default", "first",   "float",
    "int",    "items",      "join",       "last",    "length",  "list",
    "map",    "reject",     "rejectattr", "replace", "reverse", "safe",
    "select", "selectattr", "string",     "tojson",  "trim"};
const std::vector<std::string_view> kTests = {
    "boolean",  "defined", "divisibleby", "eq",      "equalto", "even",
    "false",    "float",   "ge",          "gt",      "in",      "integer",
    "iterable", "le",      "lt",          "mapping", "ne",      "none",
    "number",   "odd",     "sequence",    "string",  "true",    "undefined"};
const std::vector<std::string_view> kMethods = {
    "endswith", "get",   "items",      "keys",  "lstrip", "replace",
    "rstrip",   "split", "startswith", "strip", "values"};
const std::vector<std::string_view> kFunctions = {"namespace",
                                                  "raise_exception", "range"};

std::string joinNames(const std::vector<std::string_view> &names) {
  std::string s;
  for (auto n : names)
    s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

bool has(const std::vector<std::string_view> &names, std::string_view n) {
  return std::find(names.begin(), names.end(), n) != names.end();
}

/// A named or positional argument; nullptr when absent.
const Value *arg(const std::vector<Value> &args, const KwArgs &kwargs,
                 size_t index, std::string_view name) {
  for (const auto &[k, v] : kwargs)
    if (k == name)
      return &v;
  return index < args.size() ? &args[index] : nullptr;
}

void checkArgs(std::string_view what, const std::vector<Value> &args,
               const KwArgs &kwargs, size_t maxArgs,
               const std::vector<std::string_view> &names) {
  if (args.size() > maxArgs)
    throw ValueError(std::string(what) + " takes at most " +
                     std::to_string(maxArgs) + " argument" +
                     (maxArgs == 1 ? "" : "s") + ", got " +
                     std::to_string(args.size()));
  for (const auto &[k, v] : kwargs)
    if (!has(names, k))
      throw ValueError(std::string(what) + " has no argument '" + k + "'");
}

const std::string &needString(const Value &v, std::string_view what) {
  if (!v.isString())
    throw ValueError(std::string(what) + " needs a string, got " + typeName(v));
  return v.s;
}

int64_t needInt(const Value &v, std::string_view what) {
  if (v.kind == Value::Kind::Int)
    return v.i;
  if (v.kind == Value::Kind::Bool)
    return v.b;
  throw ValueError(std::string(what) + " needs an integer, got " + typeName(v));
}

std::optional<std::string> optString(const Value *v, std::string_view what) {
  if (!v || v->kind == Value::Kind::None)
    return std::nullopt;
  return needString(*v, what);
}

/// The items a filter or loop goes over: a list's, a string's characters,
/// a mapping's keys; nothing for undefined.
List iterate(const Value &v, std::string_view what) {
  switch (v.kind) {
  case Value::Kind::Undefined:
    return {};
  case Value::Kind::List:
    return *v.list;
  case Value::Kind::String: {
    List out;
    for (char32_t c : decodeUtf8(v.s))
      out.push_back(Value::string(encodeUtf8({c})));
    return out;
  }
  case Value::Kind::Dict: {
    List out;
    for (const auto &kv : *v.dict)
      out.push_back(Value::string(kv.first));
    return out;
  }
  default:
    throw ValueError(std::string(what) + ": " + typeName(v) +
                     " is not iterable");
  }
}

int64_t length(const Value &v) {
  switch (v.kind) {
  case Value::Kind::Undefined:
    return 0;
  case Value::Kind::String:
    return static_cast<int64_t>(decodeUtf8(v.s).size());
  case Value::Kind::List:
    return static_cast<int64_t>(v.list->size());
  case Value::Kind::Dict:
  case Value::Kind::Namespace:
    return static_cast<int64_t>(v.entries().size());
  default:
    throw ValueError("length: " + typeName(v) + " has no length");
  }
}

std::string replaceAll(const std::string &s, const std::string &from,
                       const std::string &to, int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` before every character and at the end.
    std::vector<char32_t> cps = decodeUtf8(s);
    int64_t n = 0;
    for (char32_t c : cps) {
      if (count < 0 || n < count)
        out += to, ++n;
      out += encodeUtf8({c});
    }
    if (count < 0 || n < count)
      out += to;
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t at = s.find(from, start);
    if (at == std::string::npos)
      break;
    out += s.substr(start, at - start) + to;
    start = at + from.size();
    ++n;
  }
  return out + s.substr(start);
}

/// The attribute of an item for selectattr/map (a dotted path).
Value attribute(const Value &item, const std::string &path) {
  Value v = item;
  for (const std::string &part : pySplit(path, std::string("."), -1)) {
    const Value *x = v.find(part);
    v = x ? *x : Value::undefined(part);
  }
  return v;
}

Value filterSelect(std::string_view name, const Value &operand,
                   const std::vector<Value> &args) {
  bool byAttr = name == "selectattr" || name == "rejectattr";
  bool keep = name == "select" || name == "selectattr";
  size_t k = 0;
  std::string attr;
  if (byAttr) {
    if (args.empty())
      throw ValueError(std::string(name) + " needs an attribute name");
    attr = needString(args[k++], name);
  }
  std::string test;
  if (k < args.size())
    test = needString(args[k++], name);
  if (!test.empty() && !isSupportedTest(test))
    throw ValueError("unsupported test '" + test +
                     "' (the supported tests: " + supportedTestNames() + ")");
  std::vector<Value> testArgs(args.begin() + k, args.end());
  List out;
  for (const Value &item : iterate(operand, name)) {
    Value v = byAttr ? attribute(item, attr) : item;
    bool pass = test.empty() ? truthy(v) : applyTest(test, v, testArgs);
    if (pass == keep)
      out.push_back(item);
  }
  return Value::makeList(std::move(out));
}

Value filterMap(const Value &operand, const std::vector<Value> &args,
                const KwArgs &kwargs) {
  List out;
  const Value *attr = arg({}, kwargs, 0, "attribute");
  if (attr) {
    const Value *dflt = arg({}, kwargs, 0, "default");
    for (const Value &item : iterate(operand, "map")) {
      Value v = attribute(item, needString(*attr, "map(attribute=..)"));
      out.push_back(v.isUndefined() && dflt ? *dflt : v);
    }
    return Value::makeList(std::move(out));
  }
  if (args.empty())
    throw ValueError("map needs a filter name or attribute=");
  std::string f = needString(args[0], "map");
  if (!isSupportedFilter(f) || f == "map")
    throw ValueError("map: unsupported filter '" + f + "'");
  std::vector<Value> rest(args.begin() + 1, args.end());
  for (const Value &item : iterate(operand, "map"))
    out.push_back(applyFilter(f, item, rest, kwargs));
  return Value::makeList(std::move(out));
}

Value filterNumber(std::string_view name, const Value &v, const Value *dflt) {
  bool toInt = name == "int";
  Value fallback = dflt ? *dflt : toInt ? Value::integer(0) : Value::number(0);
  if (v.isNumber()) {
    double d = toDouble(v);
    if (!toInt)
      return Value::number(d);
    if (v.kind != Value::Kind::Float)
      return Value::integer(v.kind == Value::Kind::Bool ? v.b : v.i);
    if (!std::isfinite(d) || std::fabs(d) > 9.2e18)
      return fallback;
    return Value::integer(static_cast<int64_t>(std::trunc(d)));
  }
  if (v.isString()) {
    std::string s = pyStrip(v.s, std::nullopt, true, true);
    char *end = nullptr;
    if (toInt) {
      errno = 0;
      long long i = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && *end == '\0' && errno == 0)
        return Value::integer(i);
    }
    double d = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0')
      return fallback;
    return toInt ? filterNumber(name, Value::number(d), dflt)
                 : Value::number(d);
  }
  return fallback;
}

} // namespace

std::string supportedFilterNames() { return joinNames(kFilters); }
std::string supportedTestNames() { return joinNames(kTests); }
std::string supportedMethodNames() { return joinNames(kMethods); }
std::string supportedFunctionNames() { return joinNames(kFunctions); }
bool isSupportedFilter(std::string_view n) { return has(kFilters, n); }
bool isSupportedTest(std::string_view n) { return has(kTests, n); }
bool isSupportedMethod(std::string_view n) { return has(kMethods, n); }
bool isSupportedFunction(std::string_view n) { return has(kFunctions, n); }

Value applyFilter(std::string_view name, const Value &v,
                  const std::vector<Value> &args, const KwArgs &kwargs) {
  std::string what = "filter '" + std::string(name) + "'";
  if (name == "length" || name == "count") {
    checkArgs(what, args, kwargs, 0, {});
    return Value::integer(length(v));
  }
  if (name == "trim") {
    checkArgs(what, args, kwargs, 1, {"chars"});
    return Value::string(pyStrip(
        toStr(v), optString(arg(args, kwargs, 0, "chars"), what), true, true));
  }
  if (name == "default" || name == "d") {
    checkArgs(what, args, kwargs, 2, {"default_value", "boolean"});
    const Value *dflt = arg(args, kwargs, 0, "default_value");
    const Value *boolean = arg(args, kwargs, 1, "boolean");
    bool useDefault =
        v.isUndefined() || (boolean && truthy(*boolean) && !truthy(v));
    return useDefault ? (dflt ? *dflt : Value::string("")) : v;
  }
  if (name == "join") {
    checkArgs(what, args, kwargs, 2, {"d", "attribute"});
    const Value *sep = arg(args, kwargs, 0, "d");
    const Value *attr = arg(args, kwargs, 1, "attribute");
    std::string out;
    bool first = true;
    for (const Value &item : iterate(v, what)) {
      if (!first)
        out += sep ? toStr(*sep) : "";
      first = false;
      out += toStr(attr ? attribute(item, needString(*attr, what)) : item);
    }
    return Value::string(out);
  }
  if (name == "first" || name == "last") {
    checkArgs(what, args, kwargs, 0, {});
    List items = iterate(v, what);
    if (items.empty())
      return Value::undefined(std::string(name) + " of an empty sequence");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    checkArgs(what, args, kwargs, 0, {});
    return Value::makeList(iterate(v, what));
  }
  if (name == "reverse") {
    checkArgs(what, args, kwargs, 0, {});
    List items = iterate(v, what);
    std::reverse(items.begin(), items.end());
    if (v.isString()) {
      std::string s;
      for (const Value &c : items)
        s += c.s;
      return Value::string(s);
    }
    return Value::makeList(std::move(items));
  }
  if (name == "items") {
    checkArgs(what, args, kwargs, 0, {});
    if (v.isUndefined())
      return Value::makeList({});
    if (!v.isMapping())
      throw ValueError(what + " needs a mapping, got " + typeName(v));
    List out;
    for (const auto &[k, x] : v.entries())
      out.push_back(Value::makeTuple({Value::string(k), x}));
    return Value::makeList(std::move(out));
  }
  if (name == "tojson") {
    checkArgs(what, args, kwargs, 1, {"indent"});
    const Value *indent = arg(args, kwargs, 0, "indent");
    int64_t n = indent && indent->kind != Value::Kind::None
                    ? needInt(*indent, what)
                    : -1;
    return Value::string(
        toJson(v, static_cast<int>(std::clamp<int64_t>(n, -1, 64))));
  }
  if (name == "string") {
    checkArgs(what, args, kwargs, 0, {});
    return Value::string(toStr(v));
  }
  if (name == "safe") {
    checkArgs(what, args, kwargs, 0, {});
    return v;
  }
  if (name == "int" || name == "float") {
    checkArgs(what, args, kwargs, 1, {"default"});
    return filterNumber(name, v, arg(args, kwargs, 0, "default"));
  }
  if (name == "abs") {
    checkArgs(what, args, kwargs, 0, {});
    if (v.kind == Value::Kind::Float)
      return Value::number(std::fabs(v.f));
    int64_t i = needInt(v, what);
    if (i == INT64_MIN)
      throw ValueError("integer overflow in abs");
    return Value::integer(i < 0 ? -i : i);
  }
  if (name == "replace") {
    checkArgs(what, args, kwargs, 3, {"old", "new", "count"});
    const Value *from = arg(args, kwargs, 0, "old");
    const Value *to = arg(args, kwargs, 1, "new");
    const Value *count = arg(args, kwargs, 2, "count");
    if (!from || !to)
      throw ValueError(what + " needs the old and the new text");
    return Value::string(replaceAll(toStr(v), toStr(*from), toStr(*to),
                                    count && count->kind != Value::Kind::None
                                        ? needInt(*count, what)
                                        : -1));
  }
  if (name == "select" || name == "reject" || name == "selectattr" ||
      name == "rejectattr") {
    if (!kwargs.empty())
      throw ValueError(what + " takes no keyword arguments");
    return filterSelect(name, v, args);
  }
  if (name == "map")
    return filterMap(v, args, kwargs);
  throw ValueError("unsupported " + what);
}

bool applyTest(std::string_view name, const Value &v,
               const std::vector<Value> &args) {
  using K = Value::Kind;
  auto one = [&]() -> const Value & {
    if (args.size() != 1)
      throw ValueError("test '" + std::string(name) + "' needs one argument");
    return args[0];
  };
  if (name != "eq" && name != "equalto" && name != "ne" && name != "lt" &&
      name != "le" && name != "gt" && name != "ge" && name != "in" &&
      name != "divisibleby" && !args.empty())
    throw ValueError("test '" + std::string(name) + "' takes no argument");
  if (name == "defined")
    return !v.isUndefined();
  if (name == "undefined")
    return v.isUndefined();
  if (name == "none")
    return v.kind == K::None;
  if (name == "string")
    return v.isString();
  if (name == "number")
    return v.isNumber();
  if (name == "integer")
    return v.kind == K::Int;
  if (name == "float")
    return v.kind == K::Float;
  if (name == "boolean")
    return v.kind == K::Bool;
  if (name == "true")
    return v.kind == K::Bool && v.b;
  if (name == "false")
    return v.kind == K::Bool && !v.b;
  if (name == "mapping")
    return v.kind == K::Dict;
  if (name == "sequence")
    return v.isString() || v.kind == K::List || v.kind == K::Dict;
  if (name == "iterable")
    return v.isString() || v.kind == K::List || v.kind == K::Dict ||
           v.isUndefined();
  if (name == "eq" || name == "equalto")
    return equals(v, one());
  if (name == "ne")
    return !equals(v, one());
  if (name == "lt")
    return lessThan(v, one());
  if (name == "le")
    return !lessThan(one(), v);
  if (name == "gt")
    return lessThan(one(), v);
  if (name == "ge")
    return !lessThan(v, one());
  if (name == "in")
    return contains(one(), v);
  if (name == "odd" || name == "even") {
    int64_t i = needInt(v, "test '" + std::string(name) + "'");
    return (i % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    int64_t d = needInt(one(), "test 'divisibleby'");
    if (d == 0)
      throw ValueError("divisibleby 0");
    return needInt(v, "test 'divisibleby'") % d == 0;
  }
  throw ValueError("unsupported test '" + std::string(name) + "'");
}

Value callMethod(const Value &obj, std::string_view name,
                 const std::vector<Value> &args, const KwArgs &kwargs) {
  std::string what = typeName(obj) + "." + std::string(name) + "()";
  if (obj.isString()) {
    const std::string &s = obj.s;
    if (name == "startswith" || name == "endswith") {
      checkArgs(what, args, kwargs, 1, {});
      if (args.empty())
        throw ValueError(what + " needs an argument");
      List options =
          args[0].kind == Value::Kind::List ? *args[0].list : List{args[0]};
      for (const Value &o : options) {
        const std::string &p = needString(o, what);
        bool hit = p.size() <= s.size() &&
                   (name == "startswith"
                        ? s.compare(0, p.size(), p) == 0
                        : s.compare(s.size() - p.size(), p.size(), p) == 0);
        if (hit)
          return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      checkArgs(what, args, kwargs, 1, {"chars"});
      return Value::string(
          pyStrip(s, optString(arg(args, kwargs, 0, "chars"), what),
                  name != "rstrip", name != "lstrip"));
    }
    if (name == "split") {
      checkArgs(what, args, kwargs, 2, {"sep", "maxsplit"});
      const Value *max = arg(args, kwargs, 1, "maxsplit");
      List out;
      for (std::string &part :
           pySplit(s, optString(arg(args, kwargs, 0, "sep"), what),
                   max ? needInt(*max, what) : -1))
        out.push_back(Value::string(std::move(part)));
      return Value::makeList(std::move(out));
    }
    if (name == "replace") {
      checkArgs(what, args, kwargs, 3, {});
      if (args.size() < 2)
        throw ValueError(what + " needs the old and the new text");
      return Value::string(
          replaceAll(s, needString(args[0], what), needString(args[1], what),
                     args.size() > 2 ? needInt(args[2], what) : -1));
    }
  }
  if (obj.kind == Value::Kind::Dict) {
    if (name == "get") {
      checkArgs(what, args, kwargs, 2, {});
      if (args.empty())
        throw ValueError(what + " needs a key");
      const Value *x = args[0].isString() ? obj.find(args[0].s) : nullptr;
      return x ? *x : args.size() > 1 ? args[1] : Value::none();
    }
    if (name == "items" || name == "keys" || name == "values") {
      checkArgs(what, args, kwargs, 0, {});
      List out;
      for (const auto &[k, x] : *obj.dict)
        out.push_back(name == "items"  ? Value::makeTuple({Value::string(k), x})
                      : name == "keys" ? Value::string(k)
                                       : x);
      return Value::makeList(std::move(out));
    }
  }
  throw ValueError(typeName(obj) + " has no method '" + std::string(name) +
                   "'");
}

Value callFunction(std::string_view name, const std::vector<Value> &args,
                   const KwArgs &kwargs) {
  if (name == "raise_exception") {
    checkArgs("raise_exception", args, kwargs, 1, {});
    throw RaisedError(args.empty() ? "" : toStr(args[0]));
  }
  if (name == "namespace") {
    Dict d;
    if (args.size() > 1 || (args.size() == 1 && !args[0].isMapping()))
      throw ValueError("namespace() takes keyword arguments (or one mapping)");
    if (!args.empty())
      d = args[0].entries();
    for (const auto &kv : kwargs) {
      auto it = std::find_if(d.begin(), d.end(), [&](const auto &e) {
        return e.first == kv.first;
      });
      if (it != d.end())
        it->second = kv.second;
      else
        d.push_back(kv);
    }
    return Value::makeNamespace(std::move(d));
  }
  if (name == "range") {
    checkArgs("range", args, kwargs, 3, {});
    if (args.empty())
      throw ValueError("range needs at least one argument");
    int64_t start = 0, stop, step = 1;
    if (args.size() == 1) {
      stop = needInt(args[0], "range");
    } else {
      start = needInt(args[0], "range");
      stop = needInt(args[1], "range");
      if (args.size() == 3)
        step = needInt(args[2], "range");
    }
    if (step == 0)
      throw ValueError("range() step must not be zero");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
      // Hugging Face's sandbox caps range() at 100000 items too.
      if (out.size() >= 100000)
        throw ValueError("range() is limited to 100000 items");
      out.push_back(Value::integer(i));
      if (__builtin_add_overflow(i, step, &i))
        break;
    }
    return Value::makeList(std::move(out));
  }
  throw ValueError("unsupported function '" + std::string(name) + "'");
}

} // namespace cac::rt::chat
