//===- Tokenizer.cpp - Character and byte-level BPE tokenizers ------------===//

#include "cac/Runtime/Model/Tokenizer.h"
#include "PreTokenizer.h"
#include "cac/Runtime/Model/BpeMerges.h"
#include "cac/Runtime/Model/Unicode.h"
#include "cac/Runtime/Support/FileUtil.h"

#include <algorithm>
#include <array>
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
// Byte-level helpers
//===----------------------------------------------------------------------===//

namespace {

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

/// The key of the merge of ids \p a and \p b (both below 2^32).
uint64_t mergeKey(int64_t a, int64_t b) {
  return (static_cast<uint64_t>(a) << 32) | static_cast<uint64_t>(b);
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

/// Reads model.merges (each "a b" or ["a", "b"]) into \p merges, checking
/// that both parts and their concatenation are in \p vocab.
void readMerges(const json &model, const std::string &source,
                const std::unordered_map<std::string, int64_t> &vocab,
                std::unordered_map<uint64_t, BpeMerge> &merges) {
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
    auto made = vocab.find(a + b);
    if (made == vocab.end())
      throw fail("merge #" + std::to_string(rank) + " makes '" + a + b +
                 "', which is not in the vocabulary");
    // A duplicated merge takes the rank of its last occurrence, as in
    // Hugging Face's tokenizers (whose map of merges keeps the last).
    merges[mergeKey(vocab.at(a), vocab.at(b))] = BpeMerge{rank++, made->second};
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

std::unique_ptr<BpeTokenizer>
BpeTokenizer::fromJson(const json &j, const std::string &source) {
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
    throw fail("model type '" + type +
               "' is not supported (only byte-level "
               "BPE)");
  // Ids index a dense table; a corrupt file must not make it huge.
  constexpr int64_t kMaxVocab = 1 << 24;
  auto checkMaxId = [&](int64_t maxId) {
    if (maxId >= kMaxVocab)
      throw fail("token id " + std::to_string(maxId) +
                 " is implausibly large (limit " + std::to_string(kMaxVocab) +
                 ")");
  };
  int64_t maxId = readVocab(model, source, t->vocab_);
  checkMaxId(maxId);
  readMerges(model, source, t->vocab_, t->merges_);
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

  checkMaxId(maxId);
  if (maxId < 0)
    throw fail("the vocabulary is empty");
  t->vocabSize_ = maxId + 1;
  t->idToToken_.assign(static_cast<size_t>(t->vocabSize_), std::string());
  for (const auto &[tok, id] : t->vocab_)
    t->idToToken_[id] = tok;
  for (int b = 0; b < 256; ++b) {
    auto it = t->vocab_.find(byteSymbols()[b]);
    t->byteIds_[b] = it == t->vocab_.end() ? -1 : it->second;
  }
  for (const AddedToken *a : t->addedByLength_)
    t->addedFirstByte_[static_cast<unsigned char>(a->content[0])] = true;

  // Normalizer: none, or NFC.
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    std::string n = j["normalizer"].value("type", std::string());
    if (n != "NFC")
      throw fail("normalizer '" + n + "' is not supported (only none or NFC)");
    t->nfc_ = true;
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
    next.reserve(pieces.size());
    for (std::string_view piece : pieces)
      splitPiece(style, digits, piece, next);
    pieces = std::move(next);
  }
  return pieces;
}

void BpeTokenizer::bpe(std::string_view piece,
                       std::vector<int64_t> &out) const {
  // `piece` is raw text; its bytes map one to one onto the byte symbols.
  std::string key(piece);
  {
    std::lock_guard<std::mutex> lock(cacheMutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int64_t> ids;
  const auto &syms = byteSymbols();
  std::optional<int64_t> direct;
  if (ignoreMerges_) {
    std::string mapped;
    for (char c : piece)
      mapped += syms[static_cast<unsigned char>(c)];
    if (auto it = vocab_.find(mapped); it != vocab_.end())
      direct = it->second;
  }
  if (direct) {
    ids.push_back(*direct);
  } else {
    ids.reserve(piece.size());
    for (char c : piece) {
      int64_t id = byteIds_[static_cast<unsigned char>(c)];
      if (id < 0 && !unkId_)
        throw std::runtime_error("tokenizer '" + source_ + "': symbol '" +
                                 syms[static_cast<unsigned char>(c)] +
                                 "' is not in the vocabulary and there is "
                                 "no unk_token");
      ids.push_back(id);
    }
    // A symbol outside the vocabulary (-1) merges with nothing.
    applyBpeMerges(ids, [&](int64_t a, int64_t b) -> std::optional<BpeMerge> {
      if (a < 0 || b < 0)
        return std::nullopt;
      auto it = merges_.find(mergeKey(a, b));
      if (it == merges_.end())
        return std::nullopt;
      return it->second;
    });
    for (int64_t &id : ids)
      if (id < 0)
        id = *unkId_;
  }
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cacheMutex_);
  if (cache_.size() > 200000)
    cache_.clear();
  cache_.emplace(std::move(key), std::move(ids));
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
  // Normalizer, then pre-tokenizer, then BPE, as Hugging Face runs them.
  auto encodeSegment = [&](std::string_view seg) {
    std::string normalized, withPrefix;
    if (nfc_) {
      normalized = nfc(seg);
      seg = normalized;
    }
    if (addPrefixSpace_ && !seg.empty() && seg[0] != ' ') {
      withPrefix = " ";
      withPrefix.append(seg);
      seg = withPrefix;
    }
    for (std::string_view piece : preTokenize(seg))
      bpe(piece, out);
  };
  // Split on added tokens (the earliest match, longest first), then encode
  // the text between them.
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const AddedToken *hit = nullptr;
    if (addedFirstByte_[static_cast<unsigned char>(text[i])]) {
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
                               std::to_string(id) +
                               " is not in the "
                               "vocabulary");
    const std::string &tok = idToToken_[id];
    size_t i = 0;
    while (i < tok.size()) {
      size_t at = i;
      uint32_t cp = decodeUtf8(tok, i);
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
      throw std::runtime_error("'" + p.string() +
                               "': invalid JSON: " + e.what());
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
          throw std::runtime_error("'" +
                                   (folder / "tokenizer_config.json").string() +
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
