//===- ChatTemplateValue.cpp - Python semantics of template values --------===//

#include "ChatTemplateValue.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace cac::rt::chat {

Value Value::boolean(bool v) {
  Value x = withKind(Kind::Bool);
  x.b = v;
  return x;
}

Value Value::integer(int64_t v) {
  Value x = withKind(Kind::Int);
  x.i = v;
  return x;
}

Value Value::number(double v) {
  Value x = withKind(Kind::Float);
  x.f = v;
  return x;
}

Value Value::string(std::string v) {
  Value x = withKind(Kind::String);
  x.s = std::move(v);
  return x;
}

namespace {
/// Records in \p x the depth and namespaces of one of its items.
void nestOver(Value &x, const Value &item) {
  x.depth = std::max(x.depth, item.depth + 1);
  x.holdsNamespace = x.holdsNamespace || item.holdsNamespace;
}
} // namespace

Value Value::makeList(List v) {
  Value x = withKind(Kind::List);
  x.depth = 1;
  for (const Value &item : v)
    nestOver(x, item);
  x.list = std::make_shared<const List>(std::move(v));
  return x;
}

Value Value::makeTuple(List v) {
  Value x = makeList(std::move(v));
  x.tuple = true;
  return x;
}

Value Value::makeDict(Dict v) {
  Value x = withKind(Kind::Dict);
  x.depth = 1;
  for (const auto &[k, item] : v)
    nestOver(x, item);
  x.dict = std::make_shared<const Dict>(std::move(v));
  return x;
}

Value Value::makeNamespace(Dict v) {
  Value x = withKind(Kind::Namespace);
  x.depth = 1;
  x.holdsNamespace = true;
  x.ns = std::make_shared<Dict>(std::move(v));
  return x;
}

Value Value::undefined(std::string name) {
  Value x = withKind(Kind::Undefined);
  x.s = std::move(name);
  return x;
}

const Value *Value::find(std::string_view key) const {
  if (!isMapping())
    return nullptr;
  for (const auto &[k, v] : entries())
    if (k == key)
      return &v;
  return nullptr;
}

std::string typeName(const Value &v) {
  switch (v.kind) {
  case Value::Kind::Undefined:
    return "undefined";
  case Value::Kind::None:
    return "NoneType";
  case Value::Kind::Bool:
    return "bool";
  case Value::Kind::Int:
    return "int";
  case Value::Kind::Float:
    return "float";
  case Value::Kind::String:
    return "str";
  case Value::Kind::List:
    return "list";
  case Value::Kind::Dict:
    return "dict";
  case Value::Kind::Namespace:
    return "namespace";
  }
  return "?";
}

bool truthy(const Value &v) {
  switch (v.kind) {
  case Value::Kind::Undefined:
  case Value::Kind::None:
    return false;
  case Value::Kind::Bool:
    return v.b;
  case Value::Kind::Int:
    return v.i != 0;
  case Value::Kind::Float:
    return v.f != 0.0;
  case Value::Kind::String:
    return !v.s.empty();
  case Value::Kind::List:
    return !v.list->empty();
  case Value::Kind::Dict:
  case Value::Kind::Namespace:
    return true;
  }
  return false;
}

double toDouble(const Value &v) {
  switch (v.kind) {
  case Value::Kind::Bool:
    return v.b ? 1.0 : 0.0;
  case Value::Kind::Int:
    return static_cast<double>(v.i);
  case Value::Kind::Float:
    return v.f;
  default:
    throw ValueError("expected a number, got " + typeName(v));
  }
}

namespace {

/// Python's repr of a float: the shortest digits that read back, fixed
/// notation for decimal exponents in [-4, 16), else d.ddde+XX.
std::string floatRepr(double x) {
  if (std::isnan(x))
    return "nan";
  if (std::isinf(x))
    return x < 0 ? "-inf" : "inf";
  char buf[64];
  auto res =
      std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = sci[0] == '-';
  if (neg)
    sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exp = std::stoi(sci.substr(e + 1));
  int decpt = exp + 1;
  std::string out = neg ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (decpt >= static_cast<int>(digits.size())) {
      out += digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1)
    out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+',
                exp < 0 ? -exp : exp);
  return out + ebuf;
}

std::string stringRepr(const std::string &s) {
  bool single =
      s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  char q = single ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == static_cast<unsigned char>(q))
      out += std::string("\\") + q;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else
      out += static_cast<char>(c);
  }
  return out + q;
}

void jsonString(const std::string &s, std::string &out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\b':
      out += "\\b";
      break;
    case '\f':
      out += "\\f";
      break;
    default:
      if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
    }
  }
  out += '"';
}

void jsonValue(const Value &v, int indent, int depth, std::string &out) {
  auto newline = [&](int d) {
    if (indent >= 0)
      out += "\n" + std::string(static_cast<size_t>(indent * d), ' ');
  };
  // json.dumps puts ", " between items without indent and "," with it.
  const char *comma = indent >= 0 ? "," : ", ";
  switch (v.kind) {
  case Value::Kind::None:
    out += "null";
    return;
  case Value::Kind::Bool:
    out += v.b ? "true" : "false";
    return;
  case Value::Kind::Int:
    out += std::to_string(v.i);
    return;
  case Value::Kind::Float:
    if (std::isnan(v.f))
      out += "NaN";
    else if (std::isinf(v.f))
      out += v.f < 0 ? "-Infinity" : "Infinity";
    else
      out += floatRepr(v.f);
    return;
  case Value::Kind::String:
    jsonString(v.s, out);
    return;
  case Value::Kind::List: {
    if (v.list->empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t k = 0; k < v.list->size(); ++k) {
      if (k)
        out += comma;
      newline(depth + 1);
      jsonValue((*v.list)[k], indent, depth + 1, out);
    }
    newline(depth);
    out += ']';
    return;
  }
  case Value::Kind::Dict:
  case Value::Kind::Namespace: {
    const Dict &d = v.entries();
    if (d.empty()) {
      out += "{}";
      return;
    }
    out += '{';
    for (size_t k = 0; k < d.size(); ++k) {
      if (k)
        out += comma;
      newline(depth + 1);
      jsonString(d[k].first, out);
      out += ": ";
      jsonValue(d[k].second, indent, depth + 1, out);
    }
    newline(depth);
    out += '}';
    return;
  }
  case Value::Kind::Undefined:
    break;
  }
  throw ValueError("an undefined value" +
                   (v.s.empty() ? std::string() : " ('" + v.s + "')") +
                   " is not JSON serializable");
}

} // namespace

std::string toStr(const Value &v) {
  switch (v.kind) {
  case Value::Kind::Undefined:
    return "";
  case Value::Kind::String:
    return v.s;
  default:
    return toRepr(v);
  }
}

std::string toRepr(const Value &v) {
  switch (v.kind) {
  case Value::Kind::Undefined:
    return "Undefined";
  case Value::Kind::None:
    return "None";
  case Value::Kind::Bool:
    return v.b ? "True" : "False";
  case Value::Kind::Int:
    return std::to_string(v.i);
  case Value::Kind::Float:
    return floatRepr(v.f);
  case Value::Kind::String:
    return stringRepr(v.s);
  case Value::Kind::List: {
    std::string out = v.tuple ? "(" : "[";
    for (size_t k = 0; k < v.list->size(); ++k)
      out += (k ? ", " : "") + toRepr((*v.list)[k]);
    if (v.tuple)
      return out + (v.list->size() == 1 ? ",)" : ")");
    return out + "]";
  }
  case Value::Kind::Dict: {
    std::string out = "{";
    for (size_t k = 0; k < v.dict->size(); ++k)
      out += (k ? ", " : "") + stringRepr((*v.dict)[k].first) + ": " +
             toRepr((*v.dict)[k].second);
    return out + "}";
  }
  case Value::Kind::Namespace:
    break;
  }
  throw ValueError("a namespace cannot be printed");
}

bool equals(const Value &a, const Value &b) {
  if (a.isNumber() && b.isNumber()) {
    if (a.kind != Value::Kind::Float && b.kind != Value::Kind::Float)
      return (a.kind == Value::Kind::Bool ? a.b : a.i) ==
             (b.kind == Value::Kind::Bool ? b.b : b.i);
    return toDouble(a) == toDouble(b);
  }
  if (a.kind != b.kind)
    return false;
  switch (a.kind) {
  case Value::Kind::Undefined:
  case Value::Kind::None:
    return true;
  case Value::Kind::String:
    return a.s == b.s;
  case Value::Kind::List:
    return a.tuple == b.tuple && a.list->size() == b.list->size() &&
           std::equal(
               a.list->begin(), a.list->end(), b.list->begin(),
               [](const Value &x, const Value &y) { return equals(x, y); });
  case Value::Kind::Dict: {
    if (a.dict->size() != b.dict->size())
      return false;
    for (const auto &[k, v] : *a.dict) {
      const Value *w = b.find(k);
      if (!w || !equals(v, *w))
        return false;
    }
    return true;
  }
  case Value::Kind::Namespace:
    return a.ns == b.ns;
  default:
    return false;
  }
}

bool lessThan(const Value &a, const Value &b) {
  if (a.isNumber() && b.isNumber())
    return toDouble(a) < toDouble(b);
  if (a.isString() && b.isString())
    return a.s < b.s; // UTF-8 byte order is code point order.
  if (a.kind == Value::Kind::List && b.kind == Value::Kind::List) {
    const List &x = *a.list, &y = *b.list;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k)
      if (!equals(x[k], y[k]))
        return lessThan(x[k], y[k]);
    return x.size() < y.size();
  }
  throw ValueError("'<' is not supported between " + typeName(a) + " and " +
                   typeName(b));
}

bool contains(const Value &container, const Value &item) {
  switch (container.kind) {
  case Value::Kind::Undefined:
    return false;
  case Value::Kind::String:
    if (!item.isString())
      throw ValueError("'in <string>' requires a string on the left, got " +
                       typeName(item));
    return container.s.find(item.s) != std::string::npos;
  case Value::Kind::List:
    return std::any_of(container.list->begin(), container.list->end(),
                       [&](const Value &x) { return equals(x, item); });
  case Value::Kind::Dict:
  case Value::Kind::Namespace:
    return item.isString() && container.find(item.s) != nullptr;
  default:
    throw ValueError("'in' needs a string, list or mapping on the right, got " +
                     typeName(container));
  }
}

Value fromJson(const nlohmann::ordered_json &j) {
  switch (j.type()) {
  case nlohmann::ordered_json::value_t::null:
    return Value::none();
  case nlohmann::ordered_json::value_t::boolean:
    return Value::boolean(j.get<bool>());
  case nlohmann::ordered_json::value_t::number_integer:
    return Value::integer(j.get<int64_t>());
  case nlohmann::ordered_json::value_t::number_unsigned:
    if (j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      throw ValueError("integer " + j.dump() + " is too large");
    return Value::integer(static_cast<int64_t>(j.get<uint64_t>()));
  case nlohmann::ordered_json::value_t::number_float:
    return Value::number(j.get<double>());
  case nlohmann::ordered_json::value_t::string:
    return Value::string(j.get<std::string>());
  case nlohmann::ordered_json::value_t::array: {
    List l;
    for (const auto &x : j)
      l.push_back(fromJson(x));
    return Value::makeList(std::move(l));
  }
  case nlohmann::ordered_json::value_t::object: {
    Dict d;
    for (const auto &[k, x] : j.items())
      d.emplace_back(k, fromJson(x));
    return Value::makeDict(std::move(d));
  }
  default:
    throw ValueError("unsupported JSON value " + j.dump());
  }
}

std::string toJson(const Value &v, int indent) {
  std::string out;
  jsonValue(v, indent, 0, out);
  return out;
}

//===----------------------------------------------------------------------===//
// Strings by code point
//===----------------------------------------------------------------------===//

std::vector<char32_t> decodeUtf8(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t k = 0; k < s.size();) {
    unsigned char c = s[k];
    int n = c < 0x80         ? 1
            : (c >> 5) == 6  ? 2
            : (c >> 4) == 14 ? 3
            : (c >> 3) == 30 ? 4
                             : 0;
    if (n == 0 || k + n > s.size()) {
      out.push_back(0xFFFD);
      ++k;
      continue;
    }
    char32_t cp = n == 1 ? c : c & (0x7F >> n);
    bool ok = true;
    for (int m = 1; m < n; ++m) {
      unsigned char d = s[k + m];
      ok = ok && (d >> 6) == 2;
      cp = (cp << 6) | (d & 0x3F);
    }
    out.push_back(ok ? cp : 0xFFFD);
    k += ok ? n : 1;
  }
  return out;
}

std::string encodeUtf8(const std::vector<char32_t> &cps) {
  std::string out;
  for (char32_t c : cps) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

bool isPySpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 ||
         c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

std::string pyStrip(std::string_view s, const std::optional<std::string> &chars,
                    bool left, bool right) {
  std::vector<char32_t> cps = decodeUtf8(s);
  std::vector<char32_t> set;
  if (chars)
    set = decodeUtf8(*chars);
  auto strip = [&](char32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end()
                 : isPySpace(c);
  };
  size_t b = 0, e = cps.size();
  while (left && b < e && strip(cps[b]))
    ++b;
  while (right && e > b && strip(cps[e - 1]))
    --e;
  return encodeUtf8(std::vector<char32_t>(cps.begin() + b, cps.begin() + e));
}

std::vector<std::string> pySplit(std::string_view s,
                                 const std::optional<std::string> &sep,
                                 int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty())
      throw ValueError("split: empty separator");
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t at = s.find(*sep, start);
      if (at == std::string_view::npos)
        break;
      out.emplace_back(s.substr(start, at - start));
      start = at + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  std::vector<char32_t> cps = decodeUtf8(s);
  size_t k = 0, n = cps.size();
  while (true) {
    while (k < n && isPySpace(cps[k]))
      ++k;
    if (k == n)
      break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(encodeUtf8({cps.begin() + k, cps.end()}));
      break;
    }
    size_t b = k;
    while (k < n && !isPySpace(cps[k]))
      ++k;
    out.push_back(encodeUtf8({cps.begin() + b, cps.begin() + k}));
  }
  return out;
}

} // namespace cac::rt::chat
