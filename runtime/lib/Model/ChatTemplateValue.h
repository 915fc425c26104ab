//===- ChatTemplateValue.h - Values of the chat template renderer -*- C++
//-*-===//
//
// The values a chat template computes with, and the Python semantics Jinja2
// gives them (str(), repr(), truthiness, ==, <, `in`, json.dumps), so that a
// template renders byte for byte as Hugging Face's renderer renders it.
// Internal to runtime/lib/Model (ChatTemplate.h is the public interface).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_CHATTEMPLATEVALUE_H
#define CAC_RUNTIME_MODEL_CHATTEMPLATEVALUE_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cac::rt::chat {

struct Value;
using List = std::vector<Value>;
/// A mapping with string keys, in insertion order (Python dicts keep it, and
/// `tojson` writes it).
using Dict = std::vector<std::pair<std::string, Value>>;

/// One value. Lists and dicts are immutable once built (the sandbox of
/// Hugging Face's renderer forbids mutating them); a namespace() is the one
/// mutable object, shared by reference.
struct Value {
  enum class Kind {
    Undefined,
    None,
    Bool,
    Int,
    Float,
    String,
    List,
    Dict,
    Namespace
  };
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::shared_ptr<const List> list;
  /// The entries of a Dict, or of a Namespace (then mutable through ns).
  std::shared_ptr<const Dict> dict;
  std::shared_ptr<Dict> ns;
  /// A List that Python holds as a tuple (printed `(a, b)`).
  bool tuple = false;
  /// How deeply lists and mappings nest in this value (0: a scalar; a
  /// namespace counts as 1 whatever it holds). Rendering, printing and freeing
  /// a value recurse this deep, so the evaluator bounds it where values can
  /// grow without bound: a namespace attribute set in a loop.
  uint32_t depth = 0;
  /// Whether a namespace is in this value (itself or among its items).
  bool holdsNamespace = false;

  static Value none() { return withKind(Kind::None); }
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value makeList(List v);
  static Value makeTuple(List v);
  static Value makeDict(Dict v);
  static Value makeNamespace(Dict v);
  /// An undefined value; \p name (what was looked up) goes into errors.
  static Value undefined(std::string name = "");

  bool isUndefined() const { return kind == Kind::Undefined; }
  bool isString() const { return kind == Kind::String; }
  bool isNumber() const {
    return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool;
  }
  bool isMapping() const {
    return kind == Kind::Dict || kind == Kind::Namespace;
  }
  /// The entries of a Dict or Namespace.
  const Dict &entries() const { return kind == Kind::Namespace ? *ns : *dict; }
  /// The value of \p key in a mapping, or nullptr.
  const Value *find(std::string_view key) const;

private:
  static Value withKind(Kind k) {
    Value v;
    v.kind = k;
    return v;
  }
};

/// A type or value error of the template's Python semantics; the evaluator
/// adds the position of the expression.
struct ValueError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The Python type name of a value ("str", "int", "list", "dict", ...).
std::string typeName(const Value &v);
/// Python's bool(v) (undefined is false).
bool truthy(const Value &v);
/// str(v), as `{{ v }}` prints it (undefined prints nothing).
std::string toStr(const Value &v);
/// repr(v).
std::string toRepr(const Value &v);
/// Python's ==, across int/float/bool as numbers.
bool equals(const Value &a, const Value &b);
/// Python's a < b for numbers, strings and lists; throws ValueError else.
bool lessThan(const Value &a, const Value &b);
/// Python's `a in b` for strings, lists and mappings (undefined holds
/// nothing); throws ValueError else.
bool contains(const Value &container, const Value &item);
/// The numeric value of an int, float or bool.
double toDouble(const Value &v);

/// Values from JSON (objects keep their key order).
Value fromJson(const nlohmann::ordered_json &j);
/// json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=False), as the
/// `tojson` filter of Hugging Face's renderer writes it; indent < 0: none.
std::string toJson(const Value &v, int indent = -1);

//===----------------------------------------------------------------------===//
// Strings by code point, as Python indexes them
//===----------------------------------------------------------------------===//

/// The code points of a UTF-8 string (invalid bytes map to U+FFFD).
std::vector<char32_t> decodeUtf8(std::string_view s);
/// The UTF-8 encoding of code points.
std::string encodeUtf8(const std::vector<char32_t> &cps);
/// Python's str.isspace of one code point.
bool isPySpace(char32_t c);
/// str.strip/lstrip/rstrip(chars): whitespace when \p chars is nullopt.
std::string pyStrip(std::string_view s, const std::optional<std::string> &chars,
                    bool left, bool right);
/// str.split(sep, maxsplit): on runs of whitespace when \p sep is nullopt.
std::vector<std::string> pySplit(std::string_view s,
                                 const std::optional<std::string> &sep,
                                 int64_t maxsplit);

} // namespace cac::rt::chat

#endif // CAC_RUNTIME_MODEL_CHATTEMPLATEVALUE_H
