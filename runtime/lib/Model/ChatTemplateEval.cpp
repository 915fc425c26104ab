//===- ChatTemplateEval.cpp - Rendering a chat template's syntax tree -----===//
//
// Scopes follow Jinja2: the context's variables, then the template's own
// (`set` at the top level or inside `if`), then one scope per iteration of a
// `for` loop, so that a `set` inside a loop is gone in the next iteration
// and after the loop (namespace() objects carry values out).
//
//===----------------------------------------------------------------------===//

#include "ChatTemplateBuiltins.h"
#include "ChatTemplateSyntax.h"

#include <cmath>
#include <unordered_map>

namespace cac::rt::chat {

namespace {

/// The most output one rendering may produce: a prompt is far smaller; a
/// template looping without bound stops here with an error.
constexpr size_t kMaxOutput = size_t(64) << 20;
/// The most expressions and loop iterations one rendering may take: a
/// prompt takes thousands; nested loops over long ranges stop here with an
/// error instead of running for hours.
constexpr uint64_t kMaxSteps = 2'000'000;
/// The most items a list repetition (`[x] * n`) may make.
constexpr uint64_t kMaxItems = uint64_t(1) << 20;
/// The deepest value a namespace attribute may hold. A namespace carries a
/// value from one loop iteration to the next, the one way a value's nesting
/// can grow without bound (`{% set ns.x = [ns.x] %}`), and printing or
/// freeing it recurses that deep.
constexpr uint32_t kMaxValueDepth = 200;

enum class Flow { Normal, Break, Continue };

class Renderer {
public:
  explicit Renderer(const Dict &context) {
    scopes_.emplace_back();
    for (const auto &[k, v] : context)
      scopes_.back()[k] = v;
    scopes_.emplace_back(); // the template's own variables
  }

  std::string run(const Body &body) {
    renderBody(body);
    return std::move(out_);
  }

private:
  Flow renderBody(const Body &body);
  Flow renderFor(const Stmt &s);
  void renderSet(const Stmt &s);
  void assign(const std::vector<std::string> &targets, const Value &v, Loc loc);

  Value eval(const Expr &e);
  Value evalBinary(const Expr &e, const Value &a, const Value &b);
  Value evalCompare(const Expr &e);
  Value evalItem(const Expr &e, const Value &obj, const Value &key);
  Value evalSlice(const Expr &e);
  Value evalCall(const Expr &e);
  void evalArgs(const Expr &e, size_t first, std::vector<Value> &args,
                KwArgs &kwargs);

  Value lookup(const std::string &name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end())
        return f->second;
    }
    return Value::undefined(name);
  }
  /// Counts one expression or loop iteration against kMaxSteps.
  void step(Loc loc) {
    if (++steps_ > kMaxSteps)
      fail(loc, "the template takes more than " + std::to_string(kMaxSteps) +
                    " steps (expressions and loop iterations)");
  }
  [[noreturn]] static void fail(Loc loc, const std::string &what) {
    throw TemplateError(loc, what);
  }
  /// Operations on undefined values are errors (Jinja2's default
  /// Undefined), naming what was undefined.
  static void defined(const Value &v, Loc loc) {
    if (v.isUndefined())
      fail(loc, v.s.empty() ? "an undefined value is used"
                            : "'" + v.s + "' is undefined");
  }

  std::vector<std::unordered_map<std::string, Value>> scopes_;
  std::string out_;
  uint64_t steps_ = 0;
};

Flow Renderer::renderBody(const Body &body) {
  for (const Stmt &s : body) {
    switch (s.kind) {
    case Stmt::Kind::Text:
      out_ += s.text;
      break;
    case Stmt::Kind::Output: {
      Value v = eval(*s.expr);
      try {
        out_ += toStr(v);
      } catch (const ValueError &e) {
        fail(s.expr->loc, e.what());
      }
      break;
    }
    case Stmt::Kind::If:
      for (const auto &[cond, branch] : s.branches)
        if (!cond || truthy(eval(*cond))) {
          Flow f = renderBody(branch);
          if (f != Flow::Normal)
            return f;
          break;
        }
      break;
    case Stmt::Kind::For: {
      Flow f = renderFor(s);
      if (f != Flow::Normal)
        return f;
      break;
    }
    case Stmt::Kind::Set:
      renderSet(s);
      break;
    case Stmt::Kind::Break:
      return Flow::Break;
    case Stmt::Kind::Continue:
      return Flow::Continue;
    }
    if (out_.size() > kMaxOutput)
      fail(s.loc, "the rendered text exceeds " +
                      std::to_string(kMaxOutput >> 20) + " MiB");
  }
  return Flow::Normal;
}

Flow Renderer::renderFor(const Stmt &s) {
  Value seq = eval(*s.expr);
  List items;
  switch (seq.kind) {
  case Value::Kind::Undefined:
    break;
  case Value::Kind::List:
    items = *seq.list;
    break;
  case Value::Kind::Dict:
    for (const auto &kv : *seq.dict)
      items.push_back(Value::string(kv.first));
    break;
  case Value::Kind::String:
    for (char32_t c : decodeUtf8(seq.s))
      items.push_back(Value::string(encodeUtf8({c})));
    break;
  default:
    fail(s.expr->loc, typeName(seq) + " is not iterable");
  }
  if (s.filter) {
    List kept;
    for (const Value &item : items) {
      scopes_.emplace_back();
      assign(s.targets, item, s.loc);
      bool keep = truthy(eval(*s.filter));
      scopes_.pop_back();
      if (keep)
        kept.push_back(item);
    }
    items = std::move(kept);
  }
  int64_t n = static_cast<int64_t>(items.size());
  for (int64_t k = 0; k < n; ++k) {
    step(s.loc);
    Dict loop = {{"index", Value::integer(k + 1)},
                 {"index0", Value::integer(k)},
                 {"revindex", Value::integer(n - k)},
                 {"revindex0", Value::integer(n - k - 1)},
                 {"first", Value::boolean(k == 0)},
                 {"last", Value::boolean(k == n - 1)},
                 {"length", Value::integer(n)},
                 {"depth", Value::integer(1)},
                 {"depth0", Value::integer(0)}};
    if (k > 0)
      loop.emplace_back("previtem", items[k - 1]);
    if (k + 1 < n)
      loop.emplace_back("nextitem", items[k + 1]);
    scopes_.emplace_back();
    scopes_.back()["loop"] = Value::makeDict(std::move(loop));
    assign(s.targets, items[k], s.loc);
    Flow f = renderBody(s.body);
    scopes_.pop_back();
    if (f == Flow::Break)
      break;
  }
  if (n == 0) {
    scopes_.emplace_back();
    Flow f = renderBody(s.elseBody);
    scopes_.pop_back();
    return f;
  }
  return Flow::Normal;
}

void Renderer::assign(const std::vector<std::string> &targets, const Value &v,
                      Loc loc) {
  if (targets.size() == 1) {
    scopes_.back()[targets[0]] = v;
    return;
  }
  if (v.kind != Value::Kind::List || v.list->size() != targets.size())
    fail(loc, "cannot unpack " +
                  (v.kind == Value::Kind::List
                       ? std::to_string(v.list->size()) + " values"
                       : typeName(v)) +
                  " into " + std::to_string(targets.size()) + " names");
  for (size_t k = 0; k < targets.size(); ++k)
    scopes_.back()[targets[k]] = (*v.list)[k];
}

void Renderer::renderSet(const Stmt &s) {
  Value v = eval(*s.expr);
  if (s.attr.empty()) {
    assign(s.targets, v, s.loc);
    return;
  }
  Value ns = lookup(s.targets[0]);
  if (ns.kind != Value::Kind::Namespace)
    fail(s.loc, "cannot set an attribute of '" + s.targets[0] + "' (" +
                    typeName(ns) + "): only of a namespace()");
  // A namespace attribute holding a namespace could make a cycle of
  // references (`{% set ns.me = ns %}`), never freed; no chat template needs
  // one.
  if (v.holdsNamespace)
    fail(s.loc, "cannot set '" + s.targets[0] + "." + s.attr +
                    "' to a value holding a namespace (outside the supported "
                    "subset)");
  if (v.depth > kMaxValueDepth)
    fail(s.loc, "cannot set '" + s.targets[0] + "." + s.attr +
                    "': the value is nested more than " +
                    std::to_string(kMaxValueDepth) + " deep");
  for (auto &[k, x] : *ns.ns)
    if (k == s.attr) {
      x = v;
      return;
    }
  ns.ns->emplace_back(s.attr, v);
}

Value Renderer::eval(const Expr &e) {
  using K = Expr::Kind;
  step(e.loc);
  try {
    switch (e.kind) {
    case K::Literal:
      return e.value;
    case K::Name:
      return lookup(e.name);
    case K::List:
    case K::Tuple: {
      List items;
      for (const auto &k : e.kids)
        items.push_back(eval(*k));
      return e.kind == K::List ? Value::makeList(std::move(items))
                               : Value::makeTuple(std::move(items));
    }
    case K::Dict: {
      Dict d;
      for (size_t k = 0; k + 1 < e.kids.size(); k += 2) {
        Value key = eval(*e.kids[k]);
        if (!key.isString())
          fail(e.kids[k]->loc,
               "dictionary keys must be strings here, got " + typeName(key));
        Value val = eval(*e.kids[k + 1]);
        auto it = std::find_if(d.begin(), d.end(),
                               [&](const auto &x) { return x.first == key.s; });
        if (it != d.end())
          it->second = val;
        else
          d.emplace_back(key.s, val);
      }
      return Value::makeDict(std::move(d));
    }
    case K::Attr: {
      Value obj = eval(*e.kids[0]);
      defined(obj, e.kids[0]->loc);
      const Value *v = obj.find(e.name);
      return v ? *v : Value::undefined(e.name);
    }
    case K::Item: {
      Value obj = eval(*e.kids[0]);
      return evalItem(e, obj, eval(*e.kids[1]));
    }
    case K::Slice:
      return evalSlice(e);
    case K::Call:
      return evalCall(e);
    case K::Filter: {
      std::vector<Value> args;
      KwArgs kwargs;
      Value operand = eval(*e.kids[0]);
      evalArgs(e, 1, args, kwargs);
      return applyFilter(e.name, operand, args, kwargs);
    }
    case K::Test: {
      std::vector<Value> args;
      KwArgs kwargs;
      Value operand = eval(*e.kids[0]);
      evalArgs(e, 1, args, kwargs);
      return Value::boolean(applyTest(e.name, operand, args) != e.negated);
    }
    case K::Not:
      return Value::boolean(!truthy(eval(*e.kids[0])));
    case K::Neg:
    case K::Pos: {
      Value v = eval(*e.kids[0]);
      defined(v, e.kids[0]->loc);
      if (v.kind == Value::Kind::Float)
        return Value::number(e.kind == K::Neg ? -v.f : v.f);
      if (!v.isNumber())
        fail(e.loc, std::string("bad operand type for unary ") +
                        (e.kind == K::Neg ? "-" : "+") + ": " + typeName(v));
      int64_t i = v.kind == Value::Kind::Bool ? v.b : v.i;
      if (e.kind == K::Neg && i == INT64_MIN)
        fail(e.loc, "integer overflow");
      return Value::integer(e.kind == K::Neg ? -i : i);
    }
    case K::Binary: {
      Value a = eval(*e.kids[0]);
      return evalBinary(e, a, eval(*e.kids[1]));
    }
    case K::Compare:
      return evalCompare(e);
    case K::And: {
      Value a = eval(*e.kids[0]);
      return truthy(a) ? eval(*e.kids[1]) : a;
    }
    case K::Or: {
      Value a = eval(*e.kids[0]);
      return truthy(a) ? a : eval(*e.kids[1]);
    }
    case K::Cond:
      if (truthy(eval(*e.kids[1])))
        return eval(*e.kids[0]);
      return e.kids[2] ? eval(*e.kids[2]) : Value::undefined();
    }
  } catch (const ValueError &err) {
    fail(e.loc, err.what());
  }
  fail(e.loc, "unknown expression");
}

void Renderer::evalArgs(const Expr &e, size_t first, std::vector<Value> &args,
                        KwArgs &kwargs) {
  for (size_t k = first; k < e.kids.size(); ++k)
    args.push_back(eval(*e.kids[k]));
  for (const auto &[key, x] : e.kwargs)
    kwargs.emplace_back(key, eval(*x));
}

Value Renderer::evalCall(const Expr &e) {
  const Expr &callee = *e.kids[0];
  std::vector<Value> args;
  KwArgs kwargs;
  if (callee.kind == Expr::Kind::Name) {
    if (!isSupportedFunction(callee.name))
      fail(callee.loc,
           "unsupported function '" + callee.name +
               "' (the supported functions: " + supportedFunctionNames() + ")");
    evalArgs(e, 1, args, kwargs);
    try {
      return callFunction(callee.name, args, kwargs);
    } catch (const RaisedError &r) {
      fail(e.loc, std::string("the template raised an exception: ") + r.what());
    }
  }
  Value obj = eval(*callee.kids[0]);
  defined(obj, callee.kids[0]->loc);
  evalArgs(e, 1, args, kwargs);
  return callMethod(obj, callee.name, args, kwargs);
}

Value Renderer::evalItem(const Expr &e, const Value &obj, const Value &key) {
  defined(obj, e.kids[0]->loc);
  if (obj.isMapping())
    return key.isString() && obj.find(key.s) ? *obj.find(key.s)
                                             : Value::undefined(toStr(key));
  bool seq = obj.kind == Value::Kind::List || obj.isString();
  if (!seq || (key.kind != Value::Kind::Int && key.kind != Value::Kind::Bool))
    return Value::undefined(toStr(key));
  std::vector<char32_t> cps;
  int64_t n;
  if (obj.isString()) {
    cps = decodeUtf8(obj.s);
    n = static_cast<int64_t>(cps.size());
  } else {
    n = static_cast<int64_t>(obj.list->size());
  }
  int64_t i = key.kind == Value::Kind::Bool ? key.b : key.i;
  if (i < 0)
    i += n;
  if (i < 0 || i >= n)
    return Value::undefined("index " + toStr(key));
  return obj.isString() ? Value::string(encodeUtf8({cps[i]})) : (*obj.list)[i];
}

/// Python's slice of a list or a string (by characters).
Value Renderer::evalSlice(const Expr &e) {
  Value obj = eval(*e.kids[0]);
  defined(obj, e.kids[0]->loc);
  std::optional<int64_t> parts[3];
  for (int p = 0; p < 3; ++p) {
    if (!e.kids[p + 1])
      continue;
    Value v = eval(*e.kids[p + 1]);
    if (v.kind == Value::Kind::None)
      continue;
    if (v.kind != Value::Kind::Int)
      fail(e.kids[p + 1]->loc,
           "slice indices must be integers, got " + typeName(v));
    parts[p] = v.i;
  }
  std::vector<char32_t> cps;
  if (obj.isString())
    cps = decodeUtf8(obj.s);
  else if (obj.kind != Value::Kind::List)
    fail(e.loc, typeName(obj) + " cannot be sliced");
  int64_t n = obj.isString() ? static_cast<int64_t>(cps.size())
                             : static_cast<int64_t>(obj.list->size());
  int64_t step = parts[2].value_or(1);
  if (step == 0)
    fail(e.loc, "slice step cannot be zero");
  auto adjust = [&](std::optional<int64_t> x, int64_t dflt) {
    if (!x)
      return dflt;
    int64_t v = *x;
    if (v < 0) {
      v += n;
      if (v < 0)
        v = step < 0 ? -1 : 0;
    } else if (v >= n) {
      v = step < 0 ? n - 1 : n;
    }
    return v;
  };
  int64_t start = adjust(parts[0], step < 0 ? n - 1 : 0);
  int64_t stop = adjust(parts[1], step < 0 ? -1 : n);
  List items;
  std::vector<char32_t> chars;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    if (obj.isString())
      chars.push_back(cps[i]);
    else
      items.push_back((*obj.list)[i]);
    if (__builtin_add_overflow(i, step, &i))
      break;
  }
  return obj.isString() ? Value::string(encodeUtf8(chars))
                        : Value::makeList(std::move(items));
}

Value Renderer::evalCompare(const Expr &e) {
  Value left = eval(*e.kids[0]);
  for (size_t k = 0; k < e.ops.size(); ++k) {
    Value right = eval(*e.kids[k + 1]);
    const std::string &op = e.ops[k];
    bool r;
    if (op == "==")
      r = equals(left, right);
    else if (op == "!=")
      r = !equals(left, right);
    else if (op == "in" || op == "not in")
      r = contains(right, left) == (op == "in");
    else {
      defined(left, e.kids[k]->loc);
      defined(right, e.kids[k + 1]->loc);
      r = op == "<"    ? lessThan(left, right)
          : op == "<=" ? !lessThan(right, left)
          : op == ">"  ? lessThan(right, left)
                       : !lessThan(left, right);
    }
    if (!r)
      return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

/// Python's arithmetic on int (int64, overflow an error), float, str and
/// list; `~` joins the operands' str().
Value Renderer::evalBinary(const Expr &e, const Value &a, const Value &b) {
  const std::string &op = e.name;
  if (op == "~")
    return Value::string(toStr(a) + toStr(b));
  defined(a, e.kids[0]->loc);
  defined(b, e.kids[1]->loc);
  using K = Value::Kind;
  auto isInt = [](const Value &v) {
    return v.kind == K::Int || v.kind == K::Bool;
  };
  auto asInt = [](const Value &v) -> int64_t {
    return v.kind == K::Bool ? v.b : v.i;
  };
  if (op == "+" && a.isString() && b.isString())
    return Value::string(a.s + b.s);
  if (op == "+" && a.kind == K::List && b.kind == K::List &&
      a.tuple == b.tuple) {
    List items = *a.list;
    items.insert(items.end(), b.list->begin(), b.list->end());
    Value v = Value::makeList(std::move(items));
    v.tuple = a.tuple;
    return v;
  }
  auto isSeq = [](const Value &v) { return v.isString() || v.kind == K::List; };
  if (op == "*" && ((isSeq(a) && isInt(b)) || (isSeq(b) && isInt(a)))) {
    const Value &seq = isSeq(a) ? a : b;
    int64_t n = std::max<int64_t>(0, asInt(isSeq(a) ? b : a));
    size_t unit = seq.isString() ? seq.s.size() : seq.list->size();
    uint64_t limit = seq.isString() ? kMaxOutput : kMaxItems;
    if (unit > 0 && static_cast<uint64_t>(n) > limit / unit)
      fail(e.loc, seq.isString() ? "the repeated string would exceed " +
                                       std::to_string(kMaxOutput >> 20) + " MiB"
                                 : "the repeated list would exceed " +
                                       std::to_string(kMaxItems) + " items");
    if (seq.isString()) {
      std::string out;
      for (int64_t k = 0; k < n; ++k)
        out += seq.s;
      return Value::string(out);
    }
    List items;
    for (int64_t k = 0; k < n; ++k)
      items.insert(items.end(), seq.list->begin(), seq.list->end());
    return Value::makeList(std::move(items));
  }
  if (a.isNumber() && b.isNumber()) {
    if (isInt(a) && isInt(b) && op != "/") {
      int64_t x = asInt(a), y = asInt(b), r = 0;
      bool overflow = false;
      if (op == "+")
        overflow = __builtin_add_overflow(x, y, &r);
      else if (op == "-")
        overflow = __builtin_sub_overflow(x, y, &r);
      else if (op == "*")
        overflow = __builtin_mul_overflow(x, y, &r);
      else if (op == "//" || op == "%") {
        if (y == 0)
          fail(e.loc, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1)
          fail(e.loc, "integer overflow");
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0)))
          --q, m += y; // Python rounds toward negative infinity
        r = op == "//" ? q : m;
      } else if (op == "**" && y >= 0) {
        r = 1;
        for (int64_t k = 0; k < y && !overflow; ++k)
          overflow = __builtin_mul_overflow(r, x, &r);
      } else {
        return Value::number(std::pow(double(x), double(y)));
      }
      if (overflow)
        fail(e.loc, "integer overflow");
      return Value::integer(r);
    }
    double x = toDouble(a), y = toDouble(b);
    if (op == "+")
      return Value::number(x + y);
    if (op == "-")
      return Value::number(x - y);
    if (op == "*")
      return Value::number(x * y);
    if (op == "**")
      return Value::number(std::pow(x, y));
    if (y == 0)
      fail(e.loc, "division by zero");
    if (op == "/")
      return Value::number(x / y);
    if (op == "//")
      return Value::number(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0)))
      m += y;
    return Value::number(m);
  }
  fail(e.loc, "unsupported operand types for " + op + ": " + typeName(a) +
                  " and " + typeName(b));
}

} // namespace

std::string renderTemplate(const Body &body, const Dict &context) {
  return Renderer(context).run(body);
}

} // namespace cac::rt::chat
