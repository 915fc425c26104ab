//===- PreTokenizer.cpp - The split regexes of byte-level BPE -------------===//
//
// The GPT-2 and Llama 3 / Qwen2 split patterns, implemented by hand over
// \p{L}, \p{N} and \s tables generated from the Unicode database
// (gen-unicode-tables.py writes UnicodeTables.inc). Each rule looks at most a
// few code points past a run it has scanned, and the next piece starts where
// the run ended, so a split is linear in its input.
//
//===----------------------------------------------------------------------===//

#include "PreTokenizer.h"

#include "cac/Runtime/Model/Unicode.h"

#include <algorithm>
#include <vector>

namespace cac::rt {

namespace {

enum class CharClass { Letter, Number, Space, Other };

struct Range {
  uint32_t lo, hi;
};

// \p{L}, \p{N} and \s above ASCII, generated from the Unicode database.
#include "UnicodeTables.inc"

template <size_t N> bool inRanges(uint32_t cp, const Range (&ranges)[N]) {
  const Range *it =
      std::upper_bound(ranges, ranges + N, cp,
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
    uint32_t cp = decodeUtf8(text, i);
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
    return runOf(c, j,
                 c[j].cls); // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`
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

} // namespace

void splitPiece(BpeTokenizer::SplitStyle style, int maxDigits,
                std::string_view piece, std::vector<std::string_view> &out) {
  if (style == BpeTokenizer::SplitStyle::None || piece.empty()) {
    out.push_back(piece);
    return;
  }
  std::vector<Cp> cps = decodeAll(piece);
  size_t i = 0;
  while (i < cps.size()) {
    size_t end = style == BpeTokenizer::SplitStyle::Gpt2
                     ? gpt2Next(cps, i)
                     : llama3Next(cps, i, maxDigits);
    if (end <= i)
      end = i + 1; // cannot happen, but never loop forever
    size_t b0 = cps[i].byte;
    size_t b1 = end < cps.size() ? cps[end].byte : piece.size();
    out.push_back(piece.substr(b0, b1 - b0));
    i = end;
  }
}

} // namespace cac::rt
