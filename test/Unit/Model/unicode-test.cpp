//===- unicode-test.cpp - UTF-8 coding and NFC normalization --------------===//

#include "test-util.h"

#include "cac/Runtime/Model/Unicode.h"

#include <nlohmann/json.hpp>

#include <fstream>

using namespace cac::rt;

namespace {

std::string utf8Of(std::initializer_list<uint32_t> cps) {
  std::string s;
  for (uint32_t cp : cps)
    appendUtf8(s, cp);
  return s;
}

} // namespace

TEST(Nfc, MatchesPythonUnicodedataOnEveryVector) {
  // Inputs/nfc-vectors.json: Python's unicodedata.normalize('NFC', ...) of
  // every code point NFC changes, every composite's decomposition (with
  // marks around it), Hangul in pieces and random strings of marks,
  // composables and jamo (gen-nfc-vectors.py).
  std::ifstream in(CAC_TEST_MODEL_INPUTS "/nfc-vectors.json");
  ASSERT_TRUE(in) << CAC_TEST_MODEL_INPUTS "/nfc-vectors.json";
  nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["unicode"].get<std::string>(), nfcUnicodeVersion());
  const auto &vectors = j["vectors"];
  ASSERT_GT(vectors.size(), 20000u);
  size_t failures = 0, changed = 0;
  for (const auto &v : vectors) {
    std::string input = v[0], want = v[1];
    std::string got = nfc(input);
    changed += input != want;
    if (got != want && ++failures <= 10)
      ADD_FAILURE() << "nfc of " << nlohmann::json(input).dump() << " is "
                    << nlohmann::json(got).dump() << ", Python gives "
                    << nlohmann::json(want).dump();
  }
  EXPECT_EQ(failures, 0u);
  EXPECT_GT(changed, vectors.size() / 2); // the vectors do exercise NFC
}

TEST(Nfc, ComposesReordersAndKeepsExclusions) {
  // e + acute -> é; marks of classes 230 (acute) and 220 (dot below) after
  // a: reordered to dot below first, which composes (ạ), then the acute is
  // blocked from nothing and stays.
  EXPECT_EQ(nfc(utf8Of({'e', 0x301})), utf8Of({0xE9}));
  EXPECT_EQ(nfc(utf8Of({'a', 0x301, 0x323})), utf8Of({0x1EA1, 0x301}));
  // Singletons decompose and never recompose: the Ohm sign is Omega.
  EXPECT_EQ(nfc(utf8Of({0x2126})), utf8Of({0x3A9}));
  // A composition exclusion (Devanagari QA) stays decomposed.
  EXPECT_EQ(nfc(utf8Of({0x958})), utf8Of({0x915, 0x93C}));
  // Hangul: L + V + T jamo compose to one syllable, algorithmically.
  EXPECT_EQ(nfc(utf8Of({0x1112, 0x1161, 0x11AB})), utf8Of({0xD55C}));
  EXPECT_EQ(nfc(utf8Of({0xD558, 0x11AB})), utf8Of({0xD55C}));
  // A mark at the very start has nothing to compose with.
  EXPECT_EQ(nfc(utf8Of({0x301, 'e'})), utf8Of({0x301, 'e'}));
}

TEST(Nfc, KeepsNfcTextAndInvalidBytesAsTheyAre) {
  std::string ascii = "plain text, 123";
  EXPECT_EQ(nfc(ascii), ascii);
  std::string already = utf8Of({0xE9, 0x4E2D, 0xD55C, 0x1F600});
  EXPECT_EQ(nfc(already), already);
  // Invalid bytes pass through and stop composition across them.
  std::string bad = std::string("e\xFF") + utf8Of({0x301}) + "\x80";
  EXPECT_EQ(nfc(bad), bad);
  std::string mixed = std::string("\xC3") + "e" + utf8Of({0x301});
  EXPECT_EQ(nfc(mixed), std::string("\xC3") + utf8Of({0xE9}));
}

TEST(Nfc, LongRunsOfMarksStayFast) {
  // A million marks after one letter: the ordering is a sort of the run,
  // not a quadratic insertion.
  std::string s = "a";
  for (int k = 0; k < 500000; ++k)
    s += utf8Of({0x301, 0x323});
  std::string got = nfc(s);
  std::string want = utf8Of({0x1EA1});
  for (int k = 1; k < 500000; ++k)
    want += utf8Of({0x323});
  for (int k = 0; k < 500000; ++k)
    want += utf8Of({0x301});
  EXPECT_EQ(got, want);
}
