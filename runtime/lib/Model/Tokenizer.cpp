//===- Tokenizer.cpp - Character and byte-level BPE tokenizers ------------===//

#include "cac/Runtime/Model/Tokenizer.h"
#include "cac/Runtime/Support/FileUtil.h"

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <stdexcept>

namespace fs = std::filesystem;
using nlohmann::json;

namespace cac::rt {

Tokenizer::~Tokenizer() = default;

//===----------------------------------------------------------------------===//
// CharTokenizer
//===----------------------------------------------------------------------===//

CharTokenizer::CharTokenizer() {
  bos_ = kBos;
  eos_ = kEos;
  pad_ = kPad;
}

namespace {

int64_t charId(unsigned char c) {
  if (c == '\n')
    return 3;
  if (c >= ' ' && c <= '~')
    return 4 + (c - ' ');
  return -1;
}

const char *const kCharSpecials[] = {"<pad>", "<bos>", "<eos>"};

} // namespace

std::vector<int64_t> CharTokenizer::encode(std::string_view text,
                                           bool addSpecialTokens) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size() + 1);
  if (addSpecialTokens)
    ids.push_back(kBos);
  for (size_t i = 0; i < text.size(); ++i) {
    int64_t id = charId(static_cast<unsigned char>(text[i]));
    if (id < 0) {
      static const char hex[] = "0123456789abcdef";
      unsigned char c = static_cast<unsigned char>(text[i]);
      throw std::runtime_error(
          std::string("character tokenizer: byte 0x") + hex[c >> 4] +
          hex[c & 15] + " at offset " + std::to_string(i) +
          " is not in the vocabulary (printable ASCII and newline)");
    }
    ids.push_back(id);
  }
  return ids;
}

std::string CharTokenizer::decode(const std::vector<int64_t> &ids,
                                  bool skipSpecialTokens) const {
  std::string out;
  out.reserve(ids.size());
  for (int64_t id : ids) {
    if (id < 0 || id >= vocabSize())
      throw std::runtime_error("character tokenizer: id " + std::to_string(id) +
                               " out of range [0, " +
                               std::to_string(vocabSize()) + ")");
    if (isSpecial(id)) {
      if (!skipSpecialTokens)
        out += kCharSpecials[id];
      continue;
    }
    out += idToToken(id);
  }
  return out;
}

std::optional<int64_t> CharTokenizer::tokenToId(std::string_view token) const {
  for (int64_t i = 0; i < 3; ++i)
    if (token == kCharSpecials[i])
      return i;
  if (token.size() == 1) {
    int64_t id = charId(static_cast<unsigned char>(token[0]));
    if (id >= 0)
      return id;
  }
  return std::nullopt;
}

std::string CharTokenizer::idToToken(int64_t id) const {
  if (id < 0 || id >= vocabSize())
    throw std::runtime_error("character tokenizer: id " + std::to_string(id) +
                             " out of range");
  if (id < 3)
    return kCharSpecials[id];
  if (id == 3)
    return "\n";
  return std::string(1, static_cast<char>(' ' + (id - 4)));
}

//===----------------------------------------------------------------------===//
// Unicode helpers
//===----------------------------------------------------------------------===//

namespace {

/// Decodes one UTF-8 code point at \p i and advances \p i; an invalid byte
/// decodes as U+FFFD and advances by one.
uint32_t nextCodePoint(std::string_view s, size_t &i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3
                                           : (c >> 3) == 30  ? 4
                                                             : 0;
  if (len == 0 || i + len > s.size()) {
    ++i;
    return 0xFFFD;
  }
  uint32_t cp = len == 1 ? c : c & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc >> 6) != 2) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  i += len;
  return cp;
}

void appendUtf8(std::string &out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

enum class CharClass { Letter, Number, Space, Other };

struct Range {
  uint32_t lo, hi;
};

// \p{L}, \p{N} and \s above ASCII, generated from the Unicode database.
#include "UnicodeTables.inc"

template <size_t N> bool inRanges(uint32_t cp, const Range (&ranges)[N]) {
  const Range *it = std::upper_bound(
      ranges, ranges + N, cp,
      [](uint32_t c, const Range &r) { return c < r.lo; });
  return it != ranges && cp <= (it - 1)->hi;
}

CharClass classify(uint32_t cp) {
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z'))
      return CharClass::Letter;
    if (cp >= '0' && cp <= '9')
      return CharClass::Number;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D))
      return CharClass::Space;
    return CharClass::Other;
  }
  if (inRanges(cp, kSpaceRanges))
    return CharClass::Space;
  if (inRanges(cp, kNumberRanges))
    return CharClass::Number;
  if (inRanges(cp, kLetterRanges))
    return CharClass::Letter;
  return CharClass::Other;
}

/// A decoded code point with its byte offset and class.
struct Cp {
  uint32_t cp;
  size_t byte;
  CharClass cls;
};

std::vector<Cp> decodeAll(std::string_view text) {
  std::vector<Cp> out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    size_t at = i;
    uint32_t cp = nextCodePoint(text, i);
    out.push_back({cp, at, classify(cp)});
  }
  return out;
}

uint32_t toLowerAscii(uint32_t c) {
  return (c >= 'A' && c <= 'Z') ? c + 32 : c;
}

/// Length (in code points) of a contraction 's 't 're 've 'm 'll 'd at \p i,
/// or 0.
size_t contraction(const std::vector<Cp> &c, size_t i, bool ignoreCase) {
  if (c[i].cp != '\'')
    return 0;
  auto at = [&](size_t k) -> uint32_t {
    if (k >= c.size())
      return 0;
    return ignoreCase ? toLowerAscii(c[k].cp) : c[k].cp;
  };
  uint32_t a = at(i + 1), b = at(i + 2);
  if (a == 's' || a == 't')
    return 2;
  if ((a == 'r' || a == 'v') && b == 'e')
    return 3;
  if (a == 'm')
    return 2;
  if (a == 'l' && b == 'l')
    return 3;
  if (a == 'd')
    return 2;
  return 0;
}

size_t runOf(const std::vector<Cp> &c, size_t i, CharClass cls) {
  while (i < c.size() && c[i].cls == cls)
    ++i;
  return i;
}

bool isNewline(uint32_t cp) { return cp == '\r' || cp == '\n'; }

/// Whitespace rules shared by both styles: `\s+(?!\S)|\s+` at a space.
size_t whitespaceEnd(const std::vector<Cp> &c, size_t i) {
  size_t k = runOf(c, i, CharClass::Space);
  if (k == c.size() || k - i == 1)
    return k;
  return k - 1; // leave one space to prefix the next word
}

/// End (code point index) of the piece starting at \p i, GPT-2 style.
size_t gpt2Next(const std::vector<Cp> &c, size_t i) {
  if (size_t n = contraction(c, i, /*ignoreCase=*/false))
    return i + n;
  size_t j = i + (c[i].cp == ' ' ? 1 : 0);
  if (j < c.size() && c[j].cls != CharClass::Space)
    return runOf(c, j, c[j].cls); // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`
  return whitespaceEnd(c, i);
}

/// End of the piece starting at \p i, Llama 3 / Qwen2 style.
size_t llama3Next(const std::vector<Cp> &c, size_t i, int maxDigits) {
  if (size_t n = contraction(c, i, /*ignoreCase=*/true))
    return i + n;
  CharClass cls = c[i].cls;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (cls == CharClass::Letter)
    return runOf(c, i, CharClass::Letter);
  if (cls != CharClass::Number && !isNewline(c[i].cp) && i + 1 < c.size() &&
      c[i + 1].cls == CharClass::Letter)
    return runOf(c, i + 1, CharClass::Letter);
  // \p{N}{1,K}
  if (cls == CharClass::Number) {
    size_t end = runOf(c, i, CharClass::Number);
    if (maxDigits > 0)
      end = std::min(end, i + static_cast<size_t>(maxDigits));
    return end;
  }
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  size_t j = i + (c[i].cp == ' ' ? 1 : 0);
  if (j < c.size() && c[j].cls == CharClass::Other) {
    size_t k = runOf(c, j, CharClass::Other);
    while (k < c.size() && isNewline(c[k].cp))
      ++k;
    return k;
  }
  // \s*[\r\n]+
  size_t k = runOf(c, i, CharClass::Space);
  for (size_t m = k; m > i; --m)
    if (isNewline(c[m - 1].cp))
      return m;
  return whitespaceEnd(c, i);
}

/// The GPT-2 byte → printable code point map.
const std::array<uint32_t, 256> &byteToUnicode() {
  static const std::array<uint32_t, 256> map = [] {
    std::array<uint32_t, 256> m{};
    std::array<bool, 256> direct{};
    for (int b = '!'; b <= '~'; ++b)
      direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b)
      direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b)
      direct[b] = true;
    uint32_t n = 0;
    for (int b = 0; b < 256; ++b)
      m[b] = direct[b] ? static_cast<uint32_t>(b) : 256 + n++;
    return m;
  }();
  return map;
}

/// The byte of a byte-level code point, or -1.
int unicodeToByte(uint32_t cp) {
  static const std::unordered_map<uint32_t, int> inverse = [] {
    std::unordered_map<uint32_t, int> m;
    const auto &f = byteToUnicode();
    for (int b = 0; b < 256; ++b)
      m[f[b]] = b;
    return m;
  }();
  auto it = inverse.find(cp);
  return it == inverse.end() ? -1 : it->second;
}

/// The UTF-8 spelling of each byte's code point.
const std::array<std::string, 256> &byteSymbols() {
  static const std::array<std::string, 256> syms = [] {
    std::array<std::string, 256> s;
    for (int b = 0; b < 256; ++b)
      appendUtf8(s[b], byteToUnicode()[b]);
    return s;
  }();
  return syms;
}

std::string mergeKey(std::string_view a, std::string_view b) {
  std::string k;
  k.reserve(a.size() + b.size() + 1);
  k.append(a);
  k.push_back('\0');
  k.append(b);
  return k;
}

/// The token string of a tokenizer_config.json entry (a string or an object
/// with "content"), if any.
std::optional<std::string> specialTokenString(const json &v) {
  if (v.is_string())
    return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return std::nullopt;
}

std::runtime_error tokenizerError(const std::string &source,
                                  const std::string &what) {
  return std::runtime_error("tokenizer '" + source + "': " + what);
}

/// Reads model.vocab into \p vocab; returns the largest id.
int64_t readVocab(const json &model, const std::string &source,
                  std::unordered_map<std::string, int64_t> &vocab) {
  if (!model.contains("vocab") || !model["vocab"].is_object())
    throw tokenizerError(source, "missing object 'model.vocab'");
  int64_t maxId = -1;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0)
      throw tokenizerError(source, "vocab entry '" + it.key() +
                                       "' has no non-negative id");
    int64_t id = it.value().get<int64_t>();
    vocab[it.key()] = id;
    maxId = std::max(maxId, id);
  }
  return maxId;
}

/// Reads model.merges (each "a b" or ["a", "b"]) into \p mergeRank, checking
/// that both parts and their concatenation are in \p vocab.
void readMerges(const json &model, const std::string &source,
                const std::unordered_map<std::string, int64_t> &vocab,
                std::unordered_map<std::string, int64_t> &mergeRank) {
  if (!model.contains("merges") || !model["merges"].is_array())
    return;
  auto fail = [&](const std::string &what) {
    return tokenizerError(source, what);
  };
  int64_t rank = 0;
  for (const json &m : model["merges"]) {
    std::string a, b;
    if (m.is_string()) {
      const std::string &s = m.get_ref<const std::string &>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        throw fail("merge #" + std::to_string(rank) + " '" + s +
                   "' is not two tokens separated by one space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() &&
               m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      throw fail("merge #" + std::to_string(rank) +
                 " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    for (const std::string *tok : {&a, &b})
      if (!vocab.count(*tok))
        throw fail("merge #" + std::to_string(rank) + " uses '" + *tok +
                   "', which is not in the vocabulary");
    if (!vocab.count(a + b))
      throw fail("merge #" + std::to_string(rank) + " makes '" + a + b +
                 "', which is not in the vocabulary");
    // The first occurrence of a duplicated merge keeps its rank.
    mergeRank.emplace(mergeKey(a, b), rank++);
  }
}

/// Reads added_tokens into \p added and \p addedByContent; returns the
/// largest id, or \p maxId if larger.
int64_t
readAddedTokens(const json &j, const std::string &source, int64_t maxId,
                std::map<int64_t, AddedToken> &added,
                std::unordered_map<std::string, int64_t> &addedByContent) {
  if (!j.contains("added_tokens") || !j["added_tokens"].is_array())
    return maxId;
  for (const json &a : j["added_tokens"]) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        !a.contains("content") || !a["content"].is_string())
      throw tokenizerError(
          source, "added token without integer 'id' and string 'content'");
    AddedToken tok;
    tok.id = a["id"].get<int64_t>();
    tok.content = a["content"].get<std::string>();
    tok.special = a.value("special", false);
    if (tok.id < 0 || tok.content.empty())
      throw tokenizerError(source, "added token '" + tok.content +
                                       "' has a negative id or "
                                       "empty content");
    maxId = std::max(maxId, tok.id);
    addedByContent[tok.content] = tok.id;
    added[tok.id] = std::move(tok);
  }
  return maxId;
}

/// The split of a Split pre-tokenizer, recognised from its regex.
std::pair<BpeTokenizer::SplitStyle, int> splitStage(const json &p,
                                                    const std::string &source) {
  std::string pattern;
  if (p.contains("pattern") && p["pattern"].is_object()) {
    const json &pat = p["pattern"];
    if (pat.contains("Regex") && pat["Regex"].is_string())
      pattern = pat["Regex"].get<std::string>();
  }
  if (p.value("behavior", std::string("Isolated")) != "Isolated" ||
      p.value("invert", false))
    throw tokenizerError(source, "Split pre-tokenizer: only behavior Isolated "
                                 "without invert is supported");
  auto has = [&](const char *s) {
    return pattern.find(s) != std::string::npos;
  };
  if (has("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+")) {
    int digits = has("\\p{N}{1,3}") ? 3 : has("\\p{N}+") ? 0 : 1;
    return {BpeTokenizer::SplitStyle::Llama3, digits};
  }
  if (has("?\\p{L}+") && has("?\\p{N}+"))
    return {BpeTokenizer::SplitStyle::Gpt2, 0};
  throw tokenizerError(source, "Split pre-tokenizer pattern '" + pattern +
                                   "' is not one of the supported (GPT-2, "
                                   "Llama 3, Qwen2) regexes");
}

/// Adds the stages of pre-tokenizer \p p (recursing into Sequence).
void addPreTokenizer(
    const json &p, const std::string &source, bool &addPrefixSpace,
    std::vector<std::pair<BpeTokenizer::SplitStyle, int>> &splits) {
  std::string pt = p.value("type", std::string());
  if (pt == "Sequence") {
    for (const json &q : p.value("pretokenizers", json::array()))
      addPreTokenizer(q, source, addPrefixSpace, splits);
  } else if (pt == "ByteLevel") {
    if (p.value("add_prefix_space", false))
      addPrefixSpace = true;
    if (p.value("use_regex", true))
      splits.push_back({BpeTokenizer::SplitStyle::Gpt2, 0});
  } else if (pt == "Split") {
    splits.push_back(splitStage(p, source));
  } else {
    throw tokenizerError(source, "pre-tokenizer '" + pt +
                                     "' is not supported (only "
                                     "ByteLevel, Split and Sequence)");
  }
}

/// The special tokens a post-processor adds before and after the sequence.
struct SpecialIds {
  std::vector<int64_t> &prefix, &suffix;
};

/// Adds the ids of a TemplateProcessing's "single" template to \p ids.
void addTemplate(const json &p, const std::string &source,
                 const std::unordered_map<std::string, int64_t> &addedByContent,
                 SpecialIds ids) {
  const json specials = p.value("special_tokens", json::object());
  bool afterSeq = false;
  for (const json &item : p.value("single", json::array())) {
    if (item.contains("Sequence")) {
      afterSeq = true;
      continue;
    }
    if (!item.contains("SpecialToken"))
      continue;
    std::string name = item["SpecialToken"].value("id", std::string());
    std::vector<int64_t> found;
    if (specials.contains(name) && specials[name].contains("ids")) {
      for (const json &id : specials[name]["ids"])
        found.push_back(id.get<int64_t>());
    } else if (auto it = addedByContent.find(name);
               it != addedByContent.end()) {
      found.push_back(it->second);
    } else {
      throw tokenizerError(source,
                           "TemplateProcessing names unknown special token '" +
                               name + "'");
    }
    auto &dst = afterSeq ? ids.suffix : ids.prefix;
    dst.insert(dst.end(), found.begin(), found.end());
  }
}

/// Reads post-processor \p p (recursing into Sequence): what
/// encode(..., addSpecialTokens=true) adds; names an unsupported kind in
/// \p unsupported.
void addPostProcessor(
    const json &p, const std::string &source,
    const std::unordered_map<std::string, int64_t> &addedByContent,
    SpecialIds ids, std::string &unsupported) {
  std::string pt = p.value("type", std::string());
  if (pt == "Sequence") {
    for (const json &q : p.value("processors", json::array()))
      addPostProcessor(q, source, addedByContent, ids, unsupported);
  } else if (pt == "ByteLevel") {
    // Offsets only.
  } else if (pt == "TemplateProcessing") {
    addTemplate(p, source, addedByContent, ids);
  } else {
    unsupported = pt;
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// BpeTokenizer
//===----------------------------------------------------------------------===//

std::unique_ptr<BpeTokenizer> BpeTokenizer::fromJson(const json &j,
                                                     const std::string &source) {
  // A field of an unexpected JSON type (a number where a string belongs)
  // surfaces as a json exception from value()/get(); name the file.
  try {
    return parse(j, source);
  } catch (const json::exception &e) {
    throw std::runtime_error("tokenizer '" + source +
                             "': malformed field: " + e.what());
  }
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::parse(const json &j,
                                                  const std::string &source) {
  auto fail = [&](const std::string &what) {
    return tokenizerError(source, what);
  };
  if (!j.is_object())
    throw fail("not a JSON object");
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->source_ = source;

  if (!j.contains("model") || !j["model"].is_object())
    throw fail("missing object 'model'");
  const json &model = j["model"];
  std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE")
    throw fail("model type '" + type + "' is not supported (only byte-level "
               "BPE)");
  int64_t maxId = readVocab(model, source, t->vocab_);
  readMerges(model, source, t->vocab_, t->mergeRank_);
  t->ignoreMerges_ = model.value("ignore_merges", false);
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = t->vocab_.find(model["unk_token"].get<std::string>());
    if (it != t->vocab_.end())
      t->unkId_ = it->second;
  }

  maxId = readAddedTokens(j, source, maxId, t->added_, t->addedByContent_);
  for (const auto &[id, tok] : t->added_)
    t->addedByLength_.push_back(&tok);
  std::stable_sort(t->addedByLength_.begin(), t->addedByLength_.end(),
                   [](const AddedToken *a, const AddedToken *b) {
                     return a->content.size() > b->content.size();
                   });

  // Ids index a dense table; a corrupt file must not make it huge.
  constexpr int64_t kMaxVocab = 1 << 24;
  if (maxId >= kMaxVocab)
    throw fail("token id " + std::to_string(maxId) + " is implausibly large "
               "(limit " + std::to_string(kMaxVocab) + ")");
  if (maxId < 0)
    throw fail("the vocabulary is empty");
  t->vocabSize_ = maxId + 1;
  t->idToToken_.assign(static_cast<size_t>(t->vocabSize_), std::string());
  for (const auto &[tok, id] : t->vocab_)
    t->idToToken_[id] = tok;

  // Normalizer: none, or NFC (treated as the identity).
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    std::string n = j["normalizer"].value("type", std::string());
    if (n != "NFC")
      throw fail("normalizer '" + n + "' is not supported (only none or NFC)");
  }

  if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null())
    addPreTokenizer(j["pre_tokenizer"], source, t->addPrefixSpace_, t->splits_);
  if (j.contains("post_processor") && !j["post_processor"].is_null())
    addPostProcessor(j["post_processor"], source, t->addedByContent_,
                     {t->prefixIds_, t->suffixIds_},
                     t->unsupportedPostProcessor_);
  return t;
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::fromFile(const fs::path &path) {
  std::string text = readFileToString(path);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception &e) {
    throw std::runtime_error("tokenizer '" + path.string() +
                             "': invalid JSON: " + e.what());
  }
  return fromJson(j, path.string());
}

std::vector<std::string_view>
BpeTokenizer::preTokenize(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (!text.empty())
    pieces.push_back(text);
  for (const auto &[style, digits] : splits_) {
    std::vector<std::string_view> next;
    for (std::string_view piece : pieces) {
      if (style == SplitStyle::None || piece.empty()) {
        next.push_back(piece);
        continue;
      }
      std::vector<Cp> cps = decodeAll(piece);
      size_t i = 0;
      while (i < cps.size()) {
        size_t end = style == SplitStyle::Gpt2 ? gpt2Next(cps, i)
                                               : llama3Next(cps, i, digits);
        if (end <= i)
          end = i + 1; // cannot happen, but never loop forever
        size_t b0 = cps[i].byte;
        size_t b1 = end < cps.size() ? cps[end].byte : piece.size();
        next.push_back(piece.substr(b0, b1 - b0));
        i = end;
      }
    }
    pieces = std::move(next);
  }
  return pieces;
}

void BpeTokenizer::bpe(const std::string &piece,
                       std::vector<int64_t> &out) const {
  // `piece` is already byte-mapped.
  {
    std::lock_guard<std::mutex> lock(cacheMutex_);
    auto it = cache_.find(piece);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int64_t> ids;
  auto direct = vocab_.find(piece);
  if (ignoreMerges_ && direct != vocab_.end()) {
    ids.push_back(direct->second);
  } else {
    // Symbols: one per code point of the byte-mapped piece.
    std::vector<std::string> syms;
    size_t i = 0;
    while (i < piece.size()) {
      size_t at = i;
      nextCodePoint(piece, i);
      syms.emplace_back(piece.substr(at, i - at));
    }
    while (syms.size() > 1) {
      int64_t best = std::numeric_limits<int64_t>::max();
      size_t bestAt = 0;
      for (size_t k = 0; k + 1 < syms.size(); ++k) {
        auto it = mergeRank_.find(mergeKey(syms[k], syms[k + 1]));
        if (it != mergeRank_.end() && it->second < best) {
          best = it->second;
          bestAt = k;
        }
      }
      if (best == std::numeric_limits<int64_t>::max())
        break;
      // Merge every occurrence of the best pair, left to right.
      std::string a = syms[bestAt], b = syms[bestAt + 1];
      std::vector<std::string> merged;
      merged.reserve(syms.size());
      for (size_t k = 0; k < syms.size(); ++k) {
        if (k + 1 < syms.size() && syms[k] == a && syms[k + 1] == b) {
          merged.push_back(a + b);
          ++k;
        } else {
          merged.push_back(std::move(syms[k]));
        }
      }
      syms = std::move(merged);
    }
    for (const std::string &s : syms) {
      auto it = vocab_.find(s);
      if (it != vocab_.end()) {
        ids.push_back(it->second);
      } else if (unkId_) {
        ids.push_back(*unkId_);
      } else {
        throw std::runtime_error("tokenizer '" + source_ + "': symbol '" + s +
                                 "' is not in the vocabulary and there is "
                                 "no unk_token");
      }
    }
  }
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cacheMutex_);
  if (cache_.size() > 200000)
    cache_.clear();
  cache_.emplace(piece, std::move(ids));
}

std::vector<int64_t> BpeTokenizer::encode(std::string_view text,
                                          bool addSpecialTokens) const {
  if (addSpecialTokens && !unsupportedPostProcessor_.empty())
    throw std::runtime_error("tokenizer '" + source_ + "': post-processor '" +
                             unsupportedPostProcessor_ +
                             "' is not supported; encode without special "
                             "tokens and add them yourself");
  std::vector<int64_t> out;
  if (addSpecialTokens)
    out = prefixIds_;
  const auto &syms = byteSymbols();
  auto encodeSegment = [&](std::string_view seg) {
    std::string withPrefix;
    if (addPrefixSpace_ && !seg.empty() && seg[0] != ' ') {
      withPrefix = " ";
      withPrefix.append(seg);
      seg = withPrefix;
    }
    for (std::string_view piece : preTokenize(seg)) {
      std::string mapped;
      mapped.reserve(piece.size() * 2);
      for (char c : piece)
        mapped += syms[static_cast<unsigned char>(c)];
      bpe(mapped, out);
    }
  };
  // Split on added tokens (the earliest match, longest first), then BPE the
  // text between them.
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const AddedToken *hit = nullptr;
    if (!addedByLength_.empty()) {
      for (const AddedToken *a : addedByLength_) {
        if (text.compare(i, a->content.size(), a->content) == 0) {
          hit = a;
          break;
        }
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    if (i > start)
      encodeSegment(text.substr(start, i - start));
    out.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  if (start < text.size())
    encodeSegment(text.substr(start));
  if (addSpecialTokens)
    out.insert(out.end(), suffixIds_.begin(), suffixIds_.end());
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int64_t> &ids,
                                 bool skipSpecialTokens) const {
  std::string out;
  for (int64_t id : ids) {
    auto added = added_.find(id);
    if (added != added_.end()) {
      if (!(skipSpecialTokens && added->second.special))
        out += added->second.content;
      continue;
    }
    if (id < 0 || id >= vocabSize_ || idToToken_[id].empty())
      throw std::runtime_error("tokenizer '" + source_ + "': id " +
                               std::to_string(id) + " is not in the "
                               "vocabulary");
    const std::string &tok = idToToken_[id];
    size_t i = 0;
    while (i < tok.size()) {
      size_t at = i;
      uint32_t cp = nextCodePoint(tok, i);
      int b = unicodeToByte(cp);
      if (b >= 0)
        out.push_back(static_cast<char>(b));
      else
        out.append(tok, at, i - at);
    }
  }
  return out;
}

std::optional<int64_t> BpeTokenizer::tokenToId(std::string_view token) const {
  std::string key(token);
  if (auto it = addedByContent_.find(key); it != addedByContent_.end())
    return it->second;
  if (auto it = vocab_.find(key); it != vocab_.end())
    return it->second;
  return std::nullopt;
}

std::string BpeTokenizer::idToToken(int64_t id) const {
  if (auto it = added_.find(id); it != added_.end())
    return it->second.content;
  if (id < 0 || id >= vocabSize_)
    throw std::runtime_error("tokenizer '" + source_ + "': id " +
                             std::to_string(id) + " out of range");
  return idToToken_[id];
}

bool BpeTokenizer::isSpecial(int64_t id) const {
  auto it = added_.find(id);
  return it != added_.end() && it->second.special;
}

std::unique_ptr<Tokenizer> loadTokenizer(const fs::path &folder) {
  fs::path file = folder / "tokenizer.json";
  if (!fs::exists(file))
    throw std::runtime_error("model folder '" + folder.string() +
                             "' has no tokenizer.json");
  std::unique_ptr<BpeTokenizer> tok = BpeTokenizer::fromFile(file);

  auto readJson = [](const fs::path &p) -> json {
    if (!fs::exists(p))
      return json();
    try {
      return json::parse(readFileToString(p));
    } catch (const json::exception &e) {
      throw std::runtime_error("'" + p.string() + "': invalid JSON: " +
                               e.what());
    }
  };
  json tc = readJson(folder / "tokenizer_config.json");
  json cfg = readJson(folder / "config.json");
  auto pick = [&](const char *tokenKey,
                  const char *idKey) -> std::optional<int64_t> {
    if (tc.is_object() && tc.contains(tokenKey)) {
      if (auto s = specialTokenString(tc[tokenKey])) {
        auto id = tok->tokenToId(*s);
        if (!id)
          throw std::runtime_error("'" + (folder / "tokenizer_config.json")
                                             .string() +
                                   "': " + tokenKey + " '" + *s +
                                   "' is not a token of tokenizer.json");
        return id;
      }
    }
    if (cfg.is_object() && cfg.contains(idKey)) {
      const json &v = cfg[idKey];
      if (v.is_number_integer())
        return v.get<int64_t>();
      if (v.is_array() && !v.empty() && v[0].is_number_integer())
        return v[0].get<int64_t>();
    }
    return std::nullopt;
  };
  tok->setBosId(pick("bos_token", "bos_token_id"));
  tok->setEosId(pick("eos_token", "eos_token_id"));
  tok->setPadId(pick("pad_token", "pad_token_id"));
  return tok;
}

} // namespace cac::rt
