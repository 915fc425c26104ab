//===- ManifestReader.h - manifest.json -> Manifest -------------*- C++ -*-===//
//
// The one reader of manifest.json, for the runtime and for `cac eval`. It
// checks everything docs/bundle.md requires (known names, types, the argument
// list against the buffers and parameters, unique names, what "needs" must
// list) and reports the first problem as "ORIGIN: FIELD: what is wrong". It
// works without exceptions (the compiler builds with -fno-exceptions): it
// parses with nlohmann's non-throwing entry points and checks each value's
// type before reading it.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_ABI_MANIFESTREADER_H
#define CAC_ABI_MANIFESTREADER_H

#include "cac/Abi/Manifest.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace cac::abi {

/// A manifest read from text, or the reason it could not be read.
struct ManifestOrError {
  std::optional<Manifest> manifest;
  std::string error; ///< "ORIGIN: FIELD: what is wrong"; empty on success
  /// True when the manifest was read.
  explicit operator bool() const { return manifest.has_value(); }
};

namespace detail {

using nlohmann::json;

/// A SAX handler that accepts everything and keeps the parser's message
/// about the first syntax error (nlohmann reports it without throwing).
struct JsonSyntaxError {
  std::string message;
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(json::number_integer_t) { return true; }
  bool number_unsigned(json::number_unsigned_t) { return true; }
  bool number_float(json::number_float_t, const std::string &) { return true; }
  bool string(std::string &) { return true; }
  bool binary(json::binary_t &) { return true; }
  bool start_object(std::size_t) { return true; }
  bool key(std::string &) { return true; }
  bool end_object() { return true; }
  bool start_array(std::size_t) { return true; }
  bool end_array() { return true; }
  bool parse_error(std::size_t, const std::string &,
                   const nlohmann::detail::exception &e) {
    message = e.what();
    return false;
  }
};

inline bool isIdentifier(const std::string &s) {
  if (s.empty() || !(std::isalpha((unsigned char)s[0]) || s[0] == '_'))
    return false;
  for (char c : s)
    if (!(std::isalnum((unsigned char)c) || c == '_'))
      return false;
  return true;
}

/// "'name' (kind dtype)", as argument-list errors show an argument.
inline std::string argText(const ArgSpec &a) {
  std::string s = "'" + a.name + "' (" + spelling(a.kind);
  if (a.kind != ArgKind::I64)
    s += std::string(" ") + spelling(a.dtype);
  return s + ")";
}

/// Reads one manifest; each step returns false after recording the first
/// error.
class ManifestReader {
public:
  explicit ManifestReader(std::string origin) : origin(std::move(origin)) {}

  bool read(std::string_view text, Manifest &m) {
    json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded()) {
      JsonSyntaxError syntax;
      json::sax_parse(text, &syntax);
      return fail("", "not valid JSON: " + syntax.message);
    }
    if (!root.is_object())
      return fail("", "expected a JSON object at the top, got " +
                          std::string(root.type_name()));
    // Names must be unique across buffers, parameters and the fixed
    // arguments, since the argument list refers to them by name.
    std::set<std::string> names;
    for (const FixedArgInfo &f : kFixedArgs)
      names.insert(f.name);
    return readHeader(root, m) && readBuffers(root, m, names) &&
           readParams(root, m, names) && readArgs(root, m) &&
           readKernels(root, m) && checkTree(m);
  }

  std::string error;

private:
  bool fail(const std::string &field, const std::string &message) {
    error = origin + ": " + (field.empty() ? "" : field + ": ") + message;
    return false;
  }
  static std::string join(const std::string &field, const char *key) {
    return field.empty() ? std::string(key) : field + "." + key;
  }
  static std::string at(const char *key, size_t i) {
    return std::string(key) + "[" + std::to_string(i) + "]";
  }
  static std::string typeOf(const json &v) { return v.type_name(); }
  static std::string dump(const json &v) {
    return v.dump(-1, ' ', false, json::error_handler_t::replace);
  }

  /// `obj[key]` when present and not null, else nullptr.
  static const json *optional(const json &obj, const char *key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }

  bool string(const json &v, const std::string &field, std::string &out) {
    if (!v.is_string())
      return fail(field, "expected a string, got " + typeOf(v));
    out = v.get<std::string>();
    return true;
  }
  bool requiredString(const json &obj, const std::string &field,
                      const char *key, std::string &out) {
    auto it = obj.find(key);
    if (it == obj.end())
      return fail(field, std::string("missing field '") + key + "'");
    return string(*it, join(field, key), out);
  }
  bool optionalString(const json &obj, const std::string &field,
                      const char *key, std::optional<std::string> &out) {
    out.reset();
    const json *v = optional(obj, key);
    return !v || string(*v, join(field, key), out.emplace());
  }
  /// `root[key]` as an array; nullptr when absent or null and not required.
  bool array(const json &root, const char *key, bool required,
             const json *&out) {
    auto it = root.find(key);
    out = nullptr;
    if (it == root.end() && required)
      return fail("", std::string("missing field '") + key + "'");
    if (it == root.end() || (it->is_null() && !required))
      return true;
    if (!it->is_array())
      return fail(key, "expected an array, got " + typeOf(*it));
    out = &*it;
    return true;
  }
  bool object(const json &v, const std::string &field) {
    return v.is_object() || fail(field, "expected an object, got " + typeOf(v));
  }
  /// A buffer's or parameter's name: an identifier not used before.
  bool newName(const json &obj, const std::string &field,
               std::set<std::string> &names, std::string &out) {
    if (!requiredString(obj, field, "name", out))
      return false;
    if (!isIdentifier(out))
      return fail(field + ".name", "'" + out + "' is not an identifier");
    if (!names.insert(out).second)
      return fail(field + ".name", "duplicate or reserved name '" + out + "'");
    return true;
  }

  bool readHeader(const json &root, Manifest &m) {
    std::optional<std::string> text;
    if (!requiredString(root, "", "format", m.format))
      return false;
    if (m.format != kBundleFormat)
      return fail("format", "unsupported bundle format '" + m.format +
                                "' (this reader reads '" + kBundleFormat +
                                "')");
    if (!optionalString(root, "", "estimator", text))
      return false;
    m.estimator = text.value_or("");
    if (!optionalString(root, "", "source", text))
      return false;
    m.source = text.value_or("");
    std::string dt;
    if (!requiredString(root, "", "dtype", dt))
      return false;
    std::optional<DType> parsed = parseDType(dt);
    if (!parsed || (*parsed != DType::F32 && *parsed != DType::F64))
      return fail("dtype", "expected 'f32' or 'f64', got '" + dt + "'");
    m.dtype = *parsed;
    return readNeeds(root, m) && readObjective(root, m);
  }

  bool readNeeds(const json &root, Manifest &m) {
    const json *needs;
    if (!array(root, "needs", false, needs))
      return false;
    for (size_t i = 0; needs && i < needs->size(); ++i) {
      std::string n;
      if (!string((*needs)[i], at("needs", i), n))
        return false;
      if (n == "groups")
        m.needsGroups = true;
      else if (n == "tree")
        m.needsTree = true;
      else
        return fail(at("needs", i), "unknown structure '" + n +
                                        "' (expected 'groups' or 'tree')");
    }
    return true;
  }

  bool readObjective(const json &root, Manifest &m) {
    const json *o = optional(root, "objective");
    if (!o)
      return true;
    if (!object(*o, "objective"))
      return false;
    ObjectiveSpec obj;
    std::string domain;
    if (!requiredString(*o, "objective", "wrt", obj.wrt) ||
        !requiredString(*o, "objective", "gradient", obj.gradient) ||
        !requiredString(*o, "objective", "loss_domain", domain))
      return false;
    std::optional<Domain> d = parseDomain(domain);
    if (!d)
      return fail("objective.loss_domain",
                  "unknown domain '" + domain +
                      "' (expected token, seg, seq, group or node)");
    obj.lossDomain = *d;
    m.objective = std::move(obj);
    return true;
  }

  bool readBuffer(const json &b, const std::string &field, const Manifest &m,
                  std::set<std::string> &names, int &lastRole,
                  BufferSpec &spec) {
    if (!object(b, field) || !newName(b, field, names, spec.name))
      return false;
    std::string role, domain;
    if (!requiredString(b, field, "role", role))
      return false;
    std::optional<BufferRole> r = parseRole(role);
    if (!r)
      return fail(field + ".role", "unknown role '" + role +
                                       "' (expected input, output or scratch)");
    spec.role = *r;
    if (int(spec.role) < lastRole)
      return fail(field + ".role",
                  "buffer '" + spec.name + "' (" + role +
                      ") comes after a buffer of a later role; buffers must "
                      "list inputs, then outputs, then scratch");
    lastRole = int(spec.role);
    if (!requiredString(b, field, "domain", domain))
      return false;
    std::optional<Domain> d = parseDomain(domain);
    if (!d)
      return fail(field + ".domain",
                  "unknown domain '" + domain +
                      "' (expected token, seg, seq, group, node or batch)");
    spec.domain = *d;
    std::optional<std::string> text;
    spec.dtype = m.dtype;
    if (!optionalString(b, field, "dtype", text))
      return false;
    if (text) {
      std::optional<DType> t = parseDType(*text);
      if (!t || *t == DType::I64)
        return fail(field + ".dtype",
                    "expected 'f32', 'f64' or 'i32', got '" + *text + "'");
      spec.dtype = *t;
    }
    if (!optionalString(b, field, "layout", text))
      return false;
    if (text) {
      std::optional<SegLayout> l = parseSegLayout(*text);
      if (spec.domain != Domain::Seg)
        return fail(field + ".layout", "only seg buffers have a layout ('" +
                                           spec.name + "' is " + domain + ")");
      if (!l)
        return fail(field + ".layout",
                    "expected 'by-segment' or 'by-token', got '" + *text + "'");
      spec.layout = *l;
    }
    return true;
  }

  bool readBuffers(const json &root, Manifest &m,
                   std::set<std::string> &names) {
    const json *buffers;
    if (!array(root, "buffers", true, buffers))
      return false;
    int lastRole = 0;
    for (size_t i = 0; i < buffers->size(); ++i) {
      BufferSpec spec;
      if (!readBuffer((*buffers)[i], at("buffers", i), m, names, lastRole,
                      spec))
        return false;
      m.buffers.push_back(std::move(spec));
    }
    return true;
  }

  bool readParams(const json &root, Manifest &m, std::set<std::string> &names) {
    const json *params;
    if (!array(root, "params", false, params))
      return false;
    for (size_t i = 0; params && i < params->size(); ++i) {
      std::string field = at("params", i);
      const json &p = (*params)[i];
      ParamSpec spec;
      if (!object(p, field) || !newName(p, field, names, spec.name))
        return false;
      if (const json *d = optional(p, "default")) {
        if (!d->is_number())
          return fail(field + ".default",
                      "expected a number or null, got " + typeOf(*d));
        spec.defaultValue = d->get<double>();
      }
      m.params.push_back(std::move(spec));
    }
    return true;
  }

  /// One entry of "args". The element/value type may be spelled "dtype" or
  /// "type"; a scalar's kind may be "param", "scalar" or its type ("f32").
  bool readArg(const json &a, const std::string &field, const ArgSpec *want,
               DType dtype, ArgSpec &spec) {
    std::string kind;
    if (!object(a, field) || !requiredString(a, field, "name", spec.name) ||
        !requiredString(a, field, "kind", kind))
      return false;
    const char *tyKey = optional(a, "dtype") ? "dtype" : "type";
    std::optional<std::string> ty;
    if (!optionalString(a, field, tyKey, ty))
      return false;
    std::optional<DType> parsedTy;
    if (ty && !(parsedTy = parseDType(*ty)))
      return fail(field + "." + tyKey, "unknown type '" + *ty + "'");
    if (kind == "i64") {
      spec.kind = ArgKind::I64;
      spec.dtype = DType::I64;
    } else if (kind == "ptr") {
      spec.kind = ArgKind::Ptr;
      spec.dtype = parsedTy.value_or(want ? want->dtype : DType::I32);
    } else if (kind == "f32" || kind == "f64") {
      spec.kind = ArgKind::Scalar;
      spec.dtype = *parseDType(kind);
    } else if (kind == "param" || kind == "scalar") {
      spec.kind = ArgKind::Scalar;
      spec.dtype = parsedTy.value_or(dtype);
      if (spec.dtype != DType::F32 && spec.dtype != DType::F64)
        return fail(field, "a parameter scalar must be f32 or f64");
    } else {
      return fail(field + ".kind",
                  "unknown kind '" + kind +
                      "' (expected i64, ptr, f32, f64 or param)");
    }
    return true;
  }

  bool readArgs(const json &root, Manifest &m) {
    std::vector<ArgSpec> expected = m.expectedArgs();
    const json *args;
    if (!array(root, "args", false, args))
      return false;
    if (!args) {
      m.args = std::move(expected);
      return true;
    }
    for (size_t i = 0; i < args->size(); ++i) {
      std::string field = at("args", i);
      const ArgSpec *want = i < expected.size() ? &expected[i] : nullptr;
      ArgSpec spec;
      if (!readArg((*args)[i], field, want, m.dtype, spec))
        return false;
      if (!want)
        return fail(field, "unexpected argument " + argText(spec) +
                               ": docs/bundle.md prescribes " +
                               std::to_string(expected.size()) +
                               " arguments for these buffers and parameters");
      if (spec.name != want->name || spec.kind != want->kind ||
          spec.dtype != want->dtype)
        return fail(field, "expected " + argText(*want) + ", got " +
                               argText(spec) +
                               " (docs/bundle.md: unit range, sizes, "
                               "structure arrays, buffers, parameters)");
      spec.source = want->source;
      spec.index = want->index;
      m.args.push_back(std::move(spec));
    }
    if (m.args.size() != expected.size())
      return fail("args", "has " + std::to_string(m.args.size()) +
                              " arguments, expected " +
                              std::to_string(expected.size()) + "; missing " +
                              argText(expected[m.args.size()]));
    return true;
  }

  bool readKernel(const json &k, const std::string &field,
                  std::set<std::string> &kernelNames, KernelSpec &spec) {
    std::string grid;
    if (!object(k, field) || !requiredString(k, field, "name", spec.name))
      return false;
    if (!isIdentifier(spec.name))
      return fail(field + ".name", "'" + spec.name + "' is not a symbol name");
    if (!kernelNames.insert(spec.name).second)
      return fail(field + ".name", "duplicate kernel '" + spec.name + "'");
    if (!requiredString(k, field, "grid", grid))
      return false;
    std::optional<Grid> g = parseGrid(grid);
    if (!g)
      return fail(field + ".grid",
                  "unknown grid '" + grid + "' (expected seq, group, node or batch)");
    spec.grid = *g;
    if (const json *b = optional(k, "block")) {
      if (!b->is_number_integer() || b->get<int64_t>() < 1 ||
          b->get<int64_t>() > 1024)
        return fail(field + ".block",
                    "expected an integer in [1, 1024], got " + dump(*b));
      spec.block = b->get<int64_t>();
    }
    if (const json *u = optional(k, "unit")) {
      if (!u->is_string() || (*u != "thread" && *u != "block"))
        return fail(field + ".unit",
                    "expected \"thread\" or \"block\", got " + dump(*u));
      spec.perBlock = *u == "block";
    }
    if (const json *n = optional(k, "items")) {
      if (!n->is_number_integer() || n->get<int64_t>() < 1)
        return fail(field + ".items",
                    "expected a positive integer, got " + dump(*n));
      spec.items = n->get<int64_t>();
    }
    if (const json *n = optional(k, "split")) {
      if (!n->is_number_integer() || n->get<int64_t>() < 1)
        return fail(field + ".split",
                    "expected a positive integer, got " + dump(*n));
      spec.split = n->get<int64_t>();
    }
    if (const json *c = optional(k, "carries")) {
      if (!c->is_boolean())
        return fail(field + ".carries",
                    "expected true or false, got " + dump(*c));
      if (*c && !spec.split)
        return fail(field + ".carries", "a carries kernel must have \"split\"");
      spec.carries = c->get<bool>();
    }
    std::optional<std::string> layout;
    if (!optionalString(k, field, "layout", layout))
      return false;
    spec.layout = std::move(layout);
    return true;
  }

  bool readKernels(const json &root, Manifest &m) {
    const json *kernels;
    if (!array(root, "kernels", true, kernels))
      return false;
    if (kernels->empty())
      return fail("kernels", "a bundle needs at least one kernel");
    std::set<std::string> kernelNames;
    for (size_t i = 0; i < kernels->size(); ++i) {
      KernelSpec spec;
      if (!readKernel((*kernels)[i], at("kernels", i), kernelNames, spec))
        return false;
      if (spec.grid == Grid::Node && !m.needsTree)
        return fail(at("kernels", i) + ".grid",
                    "kernel '" + spec.name +
                        "' runs over nodes but \"needs\" does not list "
                        "\"tree\"");
      m.kernels.push_back(std::move(spec));
    }
    return true;
  }

  bool checkTree(const Manifest &m) {
    for (const BufferSpec &b : m.buffers)
      if (b.domain == Domain::Node && !m.needsTree)
        return fail("buffers", "buffer '" + b.name +
                                   "' lives on nodes but \"needs\" does not "
                                   "list \"tree\"");
    return true;
  }

  std::string origin;
};

} // namespace detail

/// Parses and checks a manifest.json text; `origin` (the file) starts every
/// error message.
inline ManifestOrError
readManifest(std::string_view text,
             const std::string &origin = "manifest.json") {
  detail::ManifestReader reader(origin);
  Manifest m;
  if (!reader.read(text, m))
    return {std::nullopt, reader.error};
  return {std::move(m), ""};
}

} // namespace cac::abi

#endif // CAC_ABI_MANIFESTREADER_H
