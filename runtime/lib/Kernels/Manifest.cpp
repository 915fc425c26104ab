//===- Manifest.cpp - Parsing and validating manifest.json ----------------===//

#include "cac/Runtime/Kernels/Manifest.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

using nlohmann::json;

namespace cac::rt {

const char *dtypeName(DType t) {
  switch (t) {
  case DType::I32:
    return "i32";
  case DType::I64:
    return "i64";
  case DType::F32:
    return "f32";
  case DType::F64:
    return "f64";
  }
  return "?";
}

const char *domainName(Domain d) {
  switch (d) {
  case Domain::Token:
    return "token";
  case Domain::Seg:
    return "seg";
  case Domain::Seq:
    return "seq";
  case Domain::Group:
    return "group";
  case Domain::Node:
    return "node";
  }
  return "?";
}

const char *gridName(Grid g) {
  switch (g) {
  case Grid::Seq:
    return "seq";
  case Grid::Group:
    return "group";
  case Grid::Node:
    return "node";
  }
  return "?";
}

const char *roleName(BufferRole r) {
  switch (r) {
  case BufferRole::Input:
    return "input";
  case BufferRole::Output:
    return "output";
  case BufferRole::Scratch:
    return "scratch";
  }
  return "?";
}

const char *argKindName(ArgKind k) {
  switch (k) {
  case ArgKind::I64:
    return "i64";
  case ArgKind::Ptr:
    return "ptr";
  case ArgKind::Scalar:
    return "scalar";
  }
  return "?";
}

std::optional<DType> parseDType(const std::string &s) {
  if (s == "i32")
    return DType::I32;
  if (s == "i64")
    return DType::I64;
  if (s == "f32")
    return DType::F32;
  if (s == "f64")
    return DType::F64;
  return std::nullopt;
}

std::optional<Domain> parseDomain(const std::string &s) {
  if (s == "token")
    return Domain::Token;
  if (s == "seg")
    return Domain::Seg;
  if (s == "seq")
    return Domain::Seq;
  if (s == "group")
    return Domain::Group;
  if (s == "node")
    return Domain::Node;
  return std::nullopt;
}

std::optional<Grid> parseGrid(const std::string &s) {
  if (s == "seq")
    return Grid::Seq;
  if (s == "group")
    return Grid::Group;
  if (s == "node")
    return Grid::Node;
  return std::nullopt;
}

std::optional<BufferRole> parseRole(const std::string &s) {
  if (s == "input")
    return BufferRole::Input;
  if (s == "output")
    return BufferRole::Output;
  if (s == "scratch")
    return BufferRole::Scratch;
  return std::nullopt;
}

namespace {

/// The fixed head of the argument list: name, kind, source.
struct FixedArg {
  const char *name;
  ArgKind kind;
  ArgSource source;
};

constexpr FixedArg kFixedArgs[] = {
    {"unit_begin", ArgKind::I64, ArgSource::UnitBegin},
    {"unit_end", ArgKind::I64, ArgSource::UnitEnd},
    {"num_seqs", ArgKind::I64, ArgSource::NumSeqs},
    {"num_groups", ArgKind::I64, ArgSource::NumGroups},
    {"num_tokens", ArgKind::I64, ArgSource::NumTokens},
    {"num_nodes", ArgKind::I64, ArgSource::NumNodes},
    {"seq_offsets", ArgKind::Ptr, ArgSource::SeqOffsets},
    {"seq_group", ArgKind::Ptr, ArgSource::SeqGroup},
    {"group_offsets", ArgKind::Ptr, ArgSource::GroupOffsets},
    {"group_members", ArgKind::Ptr, ArgSource::GroupMembers},
    {"node_parent", ArgKind::Ptr, ArgSource::NodeParent},
    {"token_node", ArgKind::Ptr, ArgSource::TokenNode},
};

/// Builds "ORIGIN: FIELD: message" errors.
class Reader {
public:
  explicit Reader(std::string origin) : origin(std::move(origin)) {}

  [[noreturn]] void fail(const std::string &field,
                         const std::string &message) const {
    std::string text = origin + ": ";
    if (!field.empty())
      text += field + ": ";
    throw BundleError(text + message);
  }

  static std::string typeOf(const json &v) { return v.type_name(); }

  const json &member(const json &obj, const std::string &field,
                     const char *key) const {
    auto it = obj.find(key);
    if (it == obj.end())
      fail(field, std::string("missing field '") + key + "'");
    return *it;
  }

  std::string string(const json &v, const std::string &field) const {
    if (!v.is_string())
      fail(field, "expected a string, got " + typeOf(v));
    return v.get<std::string>();
  }

  std::string requiredString(const json &obj, const std::string &field,
                             const char *key) const {
    return string(member(obj, field, key), join(field, key));
  }

  std::optional<std::string> optionalString(const json &obj,
                                            const std::string &field,
                                            const char *key) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null())
      return std::nullopt;
    return string(*it, join(field, key));
  }

  const json &array(const json &obj, const char *key) const {
    const json &v = member(obj, "", key);
    if (!v.is_array())
      fail(key, "expected an array, got " + typeOf(v));
    return v;
  }

  static std::string join(const std::string &field, const char *key) {
    return field.empty() ? std::string(key) : field + "." + key;
  }
  static std::string at(const char *key, size_t i) {
    return std::string(key) + "[" + std::to_string(i) + "]";
  }

  std::string origin;
};

bool isIdentifier(const std::string &s) {
  if (s.empty() || !(std::isalpha((unsigned char)s[0]) || s[0] == '_'))
    return false;
  for (char c : s)
    if (!(std::isalnum((unsigned char)c) || c == '_'))
      return false;
  return true;
}

std::string argText(const ArgSpec &a) {
  std::string s = "'" + a.name + "' (" + argKindName(a.kind);
  if (a.kind != ArgKind::I64)
    s += std::string(" ") + dtypeName(a.dtype);
  return s + ")";
}

} // namespace

std::vector<ArgSpec> Manifest::expectedArgs() const {
  std::vector<ArgSpec> out;
  for (const FixedArg &f : kFixedArgs) {
    ArgSpec a;
    a.name = f.name;
    a.kind = f.kind;
    a.dtype = f.kind == ArgKind::I64 ? DType::I64 : DType::I32;
    a.source = f.source;
    out.push_back(a);
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    ArgSpec a;
    a.name = buffers[i].name;
    a.kind = ArgKind::Ptr;
    a.dtype = buffers[i].dtype;
    a.source = ArgSource::Buffer;
    a.index = static_cast<int>(i);
    out.push_back(a);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    ArgSpec a;
    a.name = params[i].name;
    a.kind = ArgKind::Scalar;
    a.dtype = dtype;
    a.source = ArgSource::Param;
    a.index = static_cast<int>(i);
    out.push_back(a);
  }
  return out;
}

int Manifest::findBuffer(const std::string &name) const {
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].name == name)
      return static_cast<int>(i);
  return -1;
}

int Manifest::findParam(const std::string &name) const {
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].name == name)
      return static_cast<int>(i);
  return -1;
}

std::vector<std::string> Manifest::bufferNames(BufferRole role) const {
  std::vector<std::string> out;
  for (const BufferSpec &b : buffers)
    if (b.role == role)
      out.push_back(b.name);
  return out;
}

Manifest Manifest::parse(const std::string &text, const std::string &origin) {
  Reader r(origin);
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error &e) {
    r.fail("", std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object())
    r.fail("",
           "expected a JSON object at the top, got " + Reader::typeOf(root));

  Manifest m;
  m.format = r.requiredString(root, "", "format");
  if (m.format != kBundleFormat)
    r.fail("format", "unsupported bundle format '" + m.format +
                         "' (this runtime reads '" + kBundleFormat + "')");
  m.estimator = r.optionalString(root, "", "estimator").value_or("");
  m.source = r.optionalString(root, "", "source").value_or("");

  std::string dt = r.requiredString(root, "", "dtype");
  auto parsedDType = parseDType(dt);
  if (!parsedDType ||
      (*parsedDType != DType::F32 && *parsedDType != DType::F64))
    r.fail("dtype", "expected 'f32' or 'f64', got '" + dt + "'");
  m.dtype = *parsedDType;

  if (auto it = root.find("needs"); it != root.end() && !it->is_null()) {
    if (!it->is_array())
      r.fail("needs", "expected an array, got " + Reader::typeOf(*it));
    for (size_t i = 0; i < it->size(); ++i) {
      std::string n = r.string((*it)[i], Reader::at("needs", i));
      if (n == "groups")
        m.needsGroups = true;
      else if (n == "tree")
        m.needsTree = true;
      else
        r.fail(Reader::at("needs", i),
               "unknown structure '" + n + "' (expected 'groups' or 'tree')");
    }
  }

  // Names must be unique across buffers, parameters and the fixed arguments,
  // since the argument list refers to them by name.
  std::set<std::string> names;
  for (const FixedArg &f : kFixedArgs)
    names.insert(f.name);

  const json &buffers = r.array(root, "buffers");
  int lastRole = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    std::string field = Reader::at("buffers", i);
    const json &b = buffers[i];
    if (!b.is_object())
      r.fail(field, "expected an object, got " + Reader::typeOf(b));
    BufferSpec spec;
    spec.name = r.requiredString(b, field, "name");
    if (!isIdentifier(spec.name))
      r.fail(field + ".name", "'" + spec.name + "' is not an identifier");
    if (!names.insert(spec.name).second)
      r.fail(field + ".name", "duplicate or reserved name '" + spec.name + "'");
    std::string role = r.requiredString(b, field, "role");
    auto parsedRole = parseRole(role);
    if (!parsedRole)
      r.fail(field + ".role",
             "unknown role '" + role + "' (expected input, output or scratch)");
    spec.role = *parsedRole;
    if (static_cast<int>(spec.role) < lastRole)
      r.fail(field + ".role",
             "buffer '" + spec.name + "' (" + role +
                 ") comes after a buffer of a later role; buffers must list "
                 "inputs, then outputs, then scratch");
    lastRole = static_cast<int>(spec.role);
    std::string domain = r.requiredString(b, field, "domain");
    auto parsedDomain = parseDomain(domain);
    if (!parsedDomain)
      r.fail(field + ".domain",
             "unknown domain '" + domain +
                 "' (expected token, seg, seq, group or node)");
    spec.domain = *parsedDomain;
    spec.dtype = m.dtype;
    if (auto bdt = r.optionalString(b, field, "dtype")) {
      auto p = parseDType(*bdt);
      if (!p || *p == DType::I64)
        r.fail(field + ".dtype",
               "expected 'f32', 'f64' or 'i32', got '" + *bdt + "'");
      spec.dtype = *p;
    }
    m.buffers.push_back(spec);
  }

  if (auto it = root.find("params"); it != root.end() && !it->is_null()) {
    if (!it->is_array())
      r.fail("params", "expected an array, got " + Reader::typeOf(*it));
    for (size_t i = 0; i < it->size(); ++i) {
      std::string field = Reader::at("params", i);
      const json &p = (*it)[i];
      if (!p.is_object())
        r.fail(field, "expected an object, got " + Reader::typeOf(p));
      ParamSpec spec;
      spec.name = r.requiredString(p, field, "name");
      if (!isIdentifier(spec.name))
        r.fail(field + ".name", "'" + spec.name + "' is not an identifier");
      if (!names.insert(spec.name).second)
        r.fail(field + ".name",
               "duplicate or reserved name '" + spec.name + "'");
      if (auto d = p.find("default"); d != p.end() && !d->is_null()) {
        if (!d->is_number())
          r.fail(field + ".default",
                 "expected a number or null, got " + Reader::typeOf(*d));
        spec.defaultValue = d->get<double>();
      }
      m.params.push_back(spec);
    }
  }

  std::vector<ArgSpec> expected = m.expectedArgs();
  if (auto it = root.find("args"); it != root.end() && !it->is_null()) {
    if (!it->is_array())
      r.fail("args", "expected an array, got " + Reader::typeOf(*it));
    for (size_t i = 0; i < it->size(); ++i) {
      std::string field = Reader::at("args", i);
      const json &a = (*it)[i];
      if (!a.is_object())
        r.fail(field, "expected an object, got " + Reader::typeOf(a));
      ArgSpec spec;
      spec.name = r.requiredString(a, field, "name");
      std::string kind = r.requiredString(a, field, "kind");
      // The element/value type may be spelled "dtype" or "type"; a scalar's
      // kind may also be its type ("f32").
      std::optional<std::string> ty = r.optionalString(a, field, "dtype");
      if (!ty)
        ty = r.optionalString(a, field, "type");
      std::optional<DType> parsedTy;
      if (ty) {
        parsedTy = parseDType(*ty);
        if (!parsedTy)
          r.fail(field + (a.contains("dtype") ? ".dtype" : ".type"),
                 "unknown type '" + *ty + "'");
      }
      if (kind == "i64") {
        spec.kind = ArgKind::I64;
        spec.dtype = DType::I64;
      } else if (kind == "ptr") {
        spec.kind = ArgKind::Ptr;
        spec.dtype = parsedTy.value_or(i < expected.size() ? expected[i].dtype
                                                           : DType::I32);
      } else if (kind == "f32" || kind == "f64") {
        spec.kind = ArgKind::Scalar;
        spec.dtype = *parseDType(kind);
      } else if (kind == "param" || kind == "scalar") {
        spec.kind = ArgKind::Scalar;
        spec.dtype = parsedTy.value_or(m.dtype);
        if (spec.dtype != DType::F32 && spec.dtype != DType::F64)
          r.fail(field, "a parameter scalar must be f32 or f64");
      } else {
        r.fail(field + ".kind", "unknown kind '" + kind +
                                    "' (expected i64, ptr, f32, f64 or param)");
      }
      if (i >= expected.size())
        r.fail(field, "unexpected argument " + argText(spec) +
                          ": docs/bundle.md prescribes " +
                          std::to_string(expected.size()) +
                          " arguments for these buffers and parameters");
      const ArgSpec &want = expected[i];
      if (spec.name != want.name || spec.kind != want.kind ||
          spec.dtype != want.dtype)
        r.fail(field, "expected " + argText(want) + ", got " + argText(spec) +
                          " (docs/bundle.md: unit range, sizes, structure "
                          "arrays, buffers, parameters)");
      spec.source = want.source;
      spec.index = want.index;
      m.args.push_back(spec);
    }
    if (m.args.size() != expected.size())
      r.fail("args", "has " + std::to_string(m.args.size()) +
                         " arguments, expected " +
                         std::to_string(expected.size()) + "; missing " +
                         argText(expected[m.args.size()]));
  } else {
    m.args = expected;
  }

  const json &kernels = r.array(root, "kernels");
  if (kernels.empty())
    r.fail("kernels", "a bundle needs at least one kernel");
  std::set<std::string> kernelNames;
  for (size_t i = 0; i < kernels.size(); ++i) {
    std::string field = Reader::at("kernels", i);
    const json &k = kernels[i];
    if (!k.is_object())
      r.fail(field, "expected an object, got " + Reader::typeOf(k));
    KernelSpec spec;
    spec.name = r.requiredString(k, field, "name");
    if (!isIdentifier(spec.name))
      r.fail(field + ".name", "'" + spec.name + "' is not a symbol name");
    if (!kernelNames.insert(spec.name).second)
      r.fail(field + ".name", "duplicate kernel '" + spec.name + "'");
    std::string grid = r.requiredString(k, field, "grid");
    auto parsedGrid = parseGrid(grid);
    if (!parsedGrid)
      r.fail(field + ".grid",
             "unknown grid '" + grid + "' (expected seq, group or node)");
    spec.grid = *parsedGrid;
    if (auto b = k.find("block"); b != k.end() && !b->is_null()) {
      if (!b->is_number_integer() || b->get<int64_t>() < 1 ||
          b->get<int64_t>() > 1024)
        r.fail(field + ".block",
               "expected an integer in [1, 1024], got " + b->dump());
      spec.block = b->get<int>();
    }
    if (auto u = k.find("unit"); u != k.end() && !u->is_null()) {
      if (!u->is_string() || (*u != "thread" && *u != "block"))
        r.fail(field + ".unit",
               "expected \"thread\" or \"block\", got " + u->dump());
      spec.perBlock = *u == "block";
    }
    if (spec.grid == Grid::Node && !m.needsTree)
      r.fail(field + ".grid",
             "kernel '" + spec.name +
                 "' runs over nodes but \"needs\" does not list \"tree\"");
    m.kernels.push_back(spec);
  }

  for (const BufferSpec &b : m.buffers)
    if (b.domain == Domain::Node && !m.needsTree)
      r.fail("buffers", "buffer '" + b.name +
                            "' lives on nodes but \"needs\" does not list "
                            "\"tree\"");
  return m;
}

Manifest Manifest::load(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw BundleError(path + ": cannot open the manifest");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

} // namespace cac::rt
