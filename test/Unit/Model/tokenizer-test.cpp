//===- tokenizer-test.cpp - Character and byte-level BPE tokenizers -------===//

#include "test-util.h"

#include "cac/Runtime/Model/Tokenizer.h"

#include <nlohmann/json.hpp>

#include <random>

namespace fs = std::filesystem;
using nlohmann::json;
using namespace cac::rt;
using namespace cac::rt::test;

namespace {

/// UTF-8 of a code point.
std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

/// GPT-2's bytes_to_unicode, written out as in the reference Python: the
/// printable bytes map to themselves, the others to 256, 257, ... in order.
std::string byteSymbol(int b) {
  auto printable = [](int x) {
    return (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) ||
           (x >= 0xAE && x <= 0xFF);
  };
  if (printable(b))
    return utf8(static_cast<uint32_t>(b));
  int n = 0;
  for (int x = 0; x < b; ++x)
    n += printable(x) ? 0 : 1;
  return utf8(256 + n);
}

/// A tiny byte-level BPE tokenizer.json: the 256 byte symbols (id = byte),
/// then merge results, then added tokens.
json tinyTokenizerJson(bool arrayMerges = false) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b)
    vocab[byteSymbol(b)] = b;
  // Ranks matter: "b c" outranks "a b", so "abc" must become a + bc → abc.
  std::vector<std::pair<std::string, std::string>> merges = {
      {"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"b", "c"},
      {"a", "b"}, {"a", "bc"}, {"Ã", "©"}, {"a", "a"},
  };
  json m = json::array();
  int id = 256;
  for (const auto &[a, b] : merges) {
    vocab[a + b] = id++;
    if (arrayMerges)
      m.push_back({a, b});
    else
      m.push_back(a + " " + b);
  }
  vocab["xyz"] = id++; // 264: reachable only with ignore_merges
  json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       {{{"id", 265}, {"content", "<|endoftext|>"}, {"special", true}},
        {{"id", 266}, {"content", "<|im_start|>"}, {"special", true}},
        {{"id", 267}, {"content", "[TOOL]"}, {"special", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"post_processor", {{"type", "ByteLevel"}, {"trim_offsets", false}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", m}}},
  };
  return j;
}

std::unique_ptr<BpeTokenizer> tinyTokenizer() {
  return BpeTokenizer::fromJson(tinyTokenizerJson(), "tiny");
}

int64_t id(const Tokenizer &t, const std::string &token) {
  auto i = t.tokenToId(token);
  EXPECT_TRUE(i.has_value()) << token;
  return i.value_or(-1);
}

std::vector<std::string> pieces(const BpeTokenizer &t, std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : t.preTokenize(text))
    out.emplace_back(p);
  return out;
}

using Ids = std::vector<int64_t>;
using Strings = std::vector<std::string>;

} // namespace

TEST(BpeTokenizer, ByteMapMatchesGpt2) {
  auto t = tinyTokenizer();
  // Spot checks of the GPT-2 table: space, newline, soft hyphen.
  EXPECT_EQ(byteSymbol(' '), "Ġ");
  EXPECT_EQ(byteSymbol('\n'), "Ċ");
  EXPECT_EQ(byteSymbol(0xAD), "Ń");
  EXPECT_EQ(t->encode(" "), Ids{' '});
  EXPECT_EQ(t->idToToken(' '), "Ġ");
  EXPECT_EQ(t->decode({' ', '\n', 0xAD}), std::string(" \n\xAD"));
  EXPECT_EQ(t->vocabSize(), 268);
}

TEST(BpeTokenizer, MergesAppliedInRankOrder) {
  auto t = tinyTokenizer();
  // Left to right would give "ab" + "c"; by rank it is a + "bc" → "abc".
  EXPECT_EQ(t->encode("abc"), Ids{id(*t, "abc")});
  EXPECT_EQ(t->encode("ab"), Ids{id(*t, "ab")});
  EXPECT_EQ(t->encode("abd"), (Ids{id(*t, "ab"), 'd'}));
  // Repeated pairs merge left to right without overlap.
  EXPECT_EQ(t->encode("aaa"), (Ids{id(*t, "aa"), 'a'}));
  EXPECT_EQ(t->encode("aaaa"), (Ids{id(*t, "aa"), id(*t, "aa")}));
  // A merge of merges: Ġ t → Ġt, h e → he, Ġt he → Ġthe.
  EXPECT_EQ(t->encode(" the"), Ids{id(*t, "Ġthe")});
  EXPECT_EQ(t->encode("the the"), (Ids{'t', id(*t, "he"), id(*t, "Ġthe")}));
  // Merges over the byte symbols of a multi-byte character: é = C3 A9.
  EXPECT_EQ(t->encode("é"), Ids{id(*t, "Ã©")});
  EXPECT_EQ(t->encode("ü"), (Ids{0xC3, 0xBC}));
  // Both spellings of merges give the same tokenizer.
  auto arr = BpeTokenizer::fromJson(tinyTokenizerJson(true), "arr");
  for (std::string s : {"abc", " the the", "aaaaa", "é"})
    EXPECT_EQ(arr->encode(s), t->encode(s)) << s;
}

TEST(BpeTokenizer, IgnoreMerges) {
  json j = tinyTokenizerJson();
  auto plain = BpeTokenizer::fromJson(j, "plain");
  EXPECT_EQ(plain->encode("xyz"), (Ids{'x', 'y', 'z'}));
  j["model"]["ignore_merges"] = true;
  auto ignoring = BpeTokenizer::fromJson(j, "ignoring");
  EXPECT_EQ(ignoring->encode("xyz"), Ids{264});
  EXPECT_EQ(ignoring->encode("abc"), Ids{id(*ignoring, "abc")});
}

TEST(BpeTokenizer, RoundTripsUtf8AndArbitraryBytes) {
  auto t = tinyTokenizer();
  for (std::string s :
       {"", "Hello, world!", "naïve café — 42€", "日本語のテキスト",
        "emoji 🙂👍🏽 mix", "tabs\tand\r\nnewlines\n\n  indented",
        "  leading and trailing  ", "it's we'll I'd", "a1b2c3 123456",
        "\xff\xfe invalid \xc3 utf-8 \x80"}) {
    Ids ids = t->encode(s);
    EXPECT_EQ(t->decode(ids), s) << s;
  }
  std::mt19937 rng(5);
  for (int k = 0; k < 300; ++k) {
    std::string s(rng() % 24, '\0');
    for (char &c : s)
      c = static_cast<char>(rng() % 256);
    EXPECT_EQ(t->decode(t->encode(s)), s);
  }
}

TEST(BpeTokenizer, Gpt2PreTokenizer) {
  auto t = tinyTokenizer();
  EXPECT_EQ(pieces(*t, "Hello world's  test 123!!"),
            (Strings{"Hello", " world", "'s", " ", " test", " 123", "!!"}));
  EXPECT_EQ(pieces(*t, "a\n\nb  "), (Strings{"a", "\n", "\n", "b", "  "}));
  EXPECT_EQ(pieces(*t, "naïve café 42€"),
            (Strings{"naïve", " café", " 42", "€"}));
  EXPECT_EQ(pieces(*t, "I'LL"), (Strings{"I", "'", "LL"}));
}

TEST(BpeTokenizer, UnicodeClassesBeyondAscii) {
  // Expected pieces computed with Python's `regex` module and the GPT-2 and
  // Llama 3 patterns: combining marks (Mn/Mc) are neither letters nor
  // numbers, other scripts' digits are numbers, U+00A0 and U+3000 are spaces.
  auto g = tinyTokenizer();
  EXPECT_EQ(pieces(*g, "हिन्दी १२३४"),
            (Strings{"ह", "ि", "न", "्", "द", "ी", " १२३४"}));
  EXPECT_EQ(pieces(*g, "x\u00a0y\u3000 z"),
            (Strings{"x", "\u00a0", "y", "\u3000", " z"}));
  EXPECT_EQ(pieces(*g, "ℕ⅓ café"), (Strings{"ℕ", "⅓", " café"}));
  EXPECT_EQ(pieces(*g, "কি? ৩"), (Strings{"ক", "ি?", " ৩"}));
  json j = tinyTokenizerJson();
  j["pre_tokenizer"] = {
      {"type", "Split"},
      {"pattern",
       {{"Regex", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|)"
                  R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|)"
                  R"(\s+(?!\S)|\s+)"}}},
      {"behavior", "Isolated"}};
  auto l = BpeTokenizer::fromJson(j, "llama3");
  EXPECT_EQ(pieces(*l, "हिन्दी १२३४"),
            (Strings{"ह", "िन", "्द", "ी", " ", "१२३", "४"}));
  EXPECT_EQ(pieces(*l, "x\u00a0y\u3000 z"),
            (Strings{"x", "\u00a0y", "\u3000", " z"}));
  EXPECT_EQ(pieces(*l, "কি? ৩"), (Strings{"ক", "ি?", " ", "৩"}));
}

TEST(BpeTokenizer, Llama3AndQwen2PreTokenizers) {
  const std::string llama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|)"
      R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const std::string qwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|)"
      R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  auto make = [&](const std::string &pattern) {
    json j = tinyTokenizerJson();
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", pattern}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"},
           {"add_prefix_space", false},
           {"trim_offsets", true},
           {"use_regex", false}}}}};
    j["normalizer"] = {{"type", "NFC"}};
    return BpeTokenizer::fromJson(j, pattern);
  };
  auto l = make(llama3);
  EXPECT_EQ(pieces(*l, "abc 12345 x\n\n y"),
            (Strings{"abc", " ", "123", "45", " x", "\n\n", " y"}));
  EXPECT_EQ(pieces(*l, "I'LL go.\nNow"),
            (Strings{"I", "'LL", " go", ".\n", "Now"}));
  EXPECT_EQ(pieces(*l, "(x)"), (Strings{"(x", ")"}));
  auto q = make(qwen2);
  EXPECT_EQ(pieces(*q, "x=12345"),
            (Strings{"x", "=", "1", "2", "3", "4", "5"}));
  std::string text = "Mixed 123 text, with ünïcode\tand  spaces\n";
  EXPECT_EQ(l->decode(l->encode(text)), text);
  EXPECT_EQ(q->decode(q->encode(text)), text);
}

TEST(BpeTokenizer, AddedTokensAndPostProcessor) {
  json j = tinyTokenizerJson();
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<|im_start|>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
        {{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}}}},
      {"special_tokens",
       {{"<|im_start|>", {{"id", "<|im_start|>"}, {"ids", {266}}}}}}};
  auto t = BpeTokenizer::fromJson(j, "tpl");
  Ids ids = t->encode("hi<|endoftext|>ab[TOOL]");
  EXPECT_EQ(ids, (Ids{'h', 'i', 265, id(*t, "ab"), 267}));
  EXPECT_EQ(t->decode(ids), "hiab[TOOL]");
  EXPECT_EQ(t->decode(ids, /*skipSpecialTokens=*/false),
            "hi<|endoftext|>ab[TOOL]");
  EXPECT_TRUE(t->isSpecial(265));
  EXPECT_FALSE(t->isSpecial(267));
  EXPECT_FALSE(t->isSpecial('a'));
  EXPECT_EQ(t->encode("ab", /*addSpecialTokens=*/true),
            (Ids{266, id(*t, "ab"), 265}));
  EXPECT_EQ(t->idToToken(266), "<|im_start|>");
  EXPECT_ERROR([&] { t->decode({999}); }, {"tpl", "999"});
}

TEST(BpeTokenizer, LoadFromFolder) {
  TempDir dir;
  writeFile(dir / "tokenizer.json", tinyTokenizerJson().dump());
  writeFile(dir / "tokenizer_config.json",
            R"({"eos_token": "<|endoftext|>",)"
            R"( "bos_token": {"content": "<|im_start|>"}, "pad_token": null})");
  writeFile(dir / "config.json", R"({"pad_token_id": 3})");
  auto t = loadTokenizer(dir.path());
  EXPECT_EQ(t->eosId(), std::optional<int64_t>(265));
  EXPECT_EQ(t->bosId(), std::optional<int64_t>(266));
  EXPECT_EQ(t->padId(), std::optional<int64_t>(3));
  EXPECT_EQ(t->decode(t->encode("the cat")), "the cat");

  writeFile(dir / "tokenizer_config.json", R"({"eos_token": "<nope>"})");
  EXPECT_ERROR([&] { loadTokenizer(dir.path()); },
               {"tokenizer_config.json", "<nope>"});
  TempDir empty;
  EXPECT_ERROR([&] { loadTokenizer(empty.path()); }, {"no tokenizer.json"});
}

TEST(BpeTokenizer, MalformedFilesNameTheFileAndTheProblem) {
  TempDir dir;
  fs::path file = dir / "tokenizer.json";
  auto expectBad = [&](const json &j, std::initializer_list<std::string> p) {
    SCOPED_TRACE(j.dump().substr(0, 80));
    writeFile(file, j.dump());
    std::string msg = errorOf([&] { BpeTokenizer::fromFile(file); });
    EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
    for (const std::string &s : p)
      EXPECT_NE(msg.find(s), std::string::npos) << msg << "\nwants: " << s;
  };
  writeFile(file, "{\"model\": ");
  EXPECT_ERROR([&] { BpeTokenizer::fromFile(file); },
               {file.string(), "invalid JSON"});
  expectBad(json::array(), {"not a JSON object"});
  expectBad(json::object(), {"'model'"});
  json j = tinyTokenizerJson();
  j["model"]["type"] = "WordPiece";
  expectBad(j, {"WordPiece", "not supported"});
  j = tinyTokenizerJson();
  j["model"]["vocab"]["bad"] = -1;
  expectBad(j, {"'bad'"});
  j = tinyTokenizerJson();
  j["model"]["merges"].push_back("q");
  expectBad(j, {"merge #8", "'q'"});
  j = tinyTokenizerJson();
  j["model"]["merges"].push_back("zz qq");
  expectBad(j, {"merge #8", "'zz'", "not in the vocabulary"});
  j = tinyTokenizerJson();
  j["model"]["merges"].push_back(7);
  expectBad(j, {"merge #8"});
  j = tinyTokenizerJson();
  j["added_tokens"].push_back({{"content", "<x>"}});
  expectBad(j, {"added token"});
  j = tinyTokenizerJson();
  j["added_tokens"].push_back(
      {{"id", 300}, {"content", "<x>"}, {"special", "yes"}});
  expectBad(j, {"malformed field"});
  j = tinyTokenizerJson();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expectBad(j, {"pre-tokenizer 'Whitespace'", "not supported"});
  j = tinyTokenizerJson();
  j["normalizer"] = {{"type", "Lowercase"}};
  expectBad(j, {"normalizer 'Lowercase'"});
  j = tinyTokenizerJson();
  j["model"]["vocab"]["huge"] = 1LL << 40;
  expectBad(j, {"implausibly large"});
  EXPECT_ERROR([&] { BpeTokenizer::fromFile(dir / "missing.json"); },
               {"missing.json"});
}

TEST(CharTokenizer, EncodesPrintableAsciiOneIdPerCharacter) {
  CharTokenizer t;
  EXPECT_EQ(t.vocabSize(), 99);
  Ids ids = t.encode("12+3=15\n");
  EXPECT_EQ(ids.size(), 8u);
  EXPECT_EQ(ids[0], 4 + ('1' - ' '));
  EXPECT_EQ(ids.back(), 3);
  EXPECT_EQ(t.decode(ids), "12+3=15\n");
  std::string all;
  for (char c = ' '; c <= '~'; ++c)
    all += c;
  EXPECT_EQ(t.decode(t.encode(all)), all);
  Ids withBos = t.encode("7", /*addSpecialTokens=*/true);
  EXPECT_EQ(withBos, (Ids{CharTokenizer::kBos, 4 + ('7' - ' ')}));
  EXPECT_EQ(t.decode({1, 27, 2, 0}), "7");
  EXPECT_EQ(t.decode({1, 27, 2}, /*skipSpecialTokens=*/false),
            "<bos>7<eos>");
  EXPECT_EQ(t.tokenToId("<eos>"), std::optional<int64_t>(2));
  EXPECT_EQ(t.tokenToId("a"), std::optional<int64_t>(4 + ('a' - ' ')));
  EXPECT_FALSE(t.tokenToId("ab").has_value());
  EXPECT_EQ(t.eosId(), std::optional<int64_t>(CharTokenizer::kEos));
  EXPECT_TRUE(t.isSpecial(0));
  EXPECT_FALSE(t.isSpecial(3));
}

TEST(CharTokenizer, RejectsWhatItCannotRepresent) {
  CharTokenizer t;
  EXPECT_ERROR([&] { t.encode("ok é"); }, {"0xc3", "offset 3"});
  EXPECT_ERROR([&] { t.encode("a\tb"); }, {"0x09", "offset 1"});
  EXPECT_ERROR([&] { t.decode({5, 99}); }, {"id 99", "out of range"});
  EXPECT_ERROR([&] { t.idToToken(-1); }, {"out of range"});
}

TEST(BpeTokenizer, NfcNormalizerComposesBeforeSplitting) {
  // "e" + U+0301 is "é" in NFC, whose bytes C3 A9 merge ("Ã" + "©").
  std::string decomposed = "caf" + utf8(0x65) + utf8(0x301);
  auto plain = tinyTokenizer();
  EXPECT_EQ(plain->encode(decomposed), (Ids{'c', 'a', 'f', 'e', 0xCC, 0x81}));
  json j = tinyTokenizerJson();
  j["normalizer"] = {{"type", "NFC"}};
  auto t = BpeTokenizer::fromJson(j, "nfc");
  Ids composed = {'c', 'a', 'f', id(*t, "Ã©")};
  EXPECT_EQ(t->encode(decomposed), composed);
  EXPECT_EQ(t->encode("caf" + utf8(0xE9)), composed);
  // Added tokens are matched before normalization, and the text on each
  // side normalizes on its own.
  EXPECT_EQ(t->encode("e<|endoftext|>" + utf8(0x301)),
            (Ids{'e', 265, 0xCC, 0x81}));
}

TEST(BpeTokenizer, SplitsLongTextInOnePass) {
  // 4 MB of mixed runs: a split that rescanned would not finish.
  auto t = tinyTokenizer();
  std::string s;
  for (int k = 0; s.size() < (4u << 20); ++k)
    s += k % 3 ? "word   " : "\n\n  123 !!";
  std::string joined;
  size_t count = 0;
  for (std::string_view p : t->preTokenize(s)) {
    joined.append(p);
    ++count;
  }
  EXPECT_EQ(joined, s);
  EXPECT_GT(count, s.size() / 8);
  EXPECT_EQ(t->decode(t->encode(s)), s);
}

TEST(BpeTokenizer, DuplicatedMergeTakesItsLastRank) {
  // Hugging Face's tokenizers: merges ["a b", "b c", "a b"] make "abc"
  // a + bc (the second "a b" ranks after "b c"), and ["b c", "a b", "b c"]
  // make ab + c.
  json j = tinyTokenizerJson();
  j["model"]["merges"] = {"a b", "b c", "a b"};
  auto t = BpeTokenizer::fromJson(j, "dup");
  EXPECT_EQ(t->encode("abc"), (Ids{'a', id(*t, "bc")}));
  j["model"]["merges"] = {"b c", "a b", "b c"};
  t = BpeTokenizer::fromJson(j, "dup");
  EXPECT_EQ(t->encode("abc"), (Ids{id(*t, "ab"), 'c'}));
}
