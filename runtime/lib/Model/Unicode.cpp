//===- Unicode.cpp - UTF-8 coding and NFC normalization -------------------===//
//
// NFC as Unicode Standard Annex #15 defines it. The text is cut before every
// code point that is stable in NFC (see gen-nfc-tables.py): nothing reorders
// or composes across such a code point, so each piece normalizes on its own
// and a piece of one stable code point is copied as it is.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Model/Unicode.h"

#include <algorithm>
#include <optional>
#include <vector>

namespace cac::rt {

uint32_t decodeUtf8(std::string_view s, size_t &i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  int len = c < 0x80         ? 1
            : (c >> 5) == 6  ? 2
            : (c >> 4) == 14 ? 3
            : (c >> 3) == 30 ? 4
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

namespace {

struct Range {
  uint32_t lo, hi;
};
struct CombiningClassRange {
  uint32_t lo, hi;
  uint8_t ccc;
};
struct Decomposition {
  uint32_t cp;
  uint16_t offset;
  uint8_t length;
};
struct Composition {
  uint32_t first, second, composite;
};

#include "NfcTables.inc"

// Hangul syllables are (leading consonant, vowel, optional trailing
// consonant) and compose by arithmetic (Unicode chapter 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161,
                   kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28,
                   kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

bool isUnstable(uint32_t cp) {
  const Range *end = std::end(kUnstableRanges);
  const Range *it =
      std::upper_bound(std::begin(kUnstableRanges), end, cp,
                       [](uint32_t c, const Range &r) { return c < r.lo; });
  return it != std::begin(kUnstableRanges) && cp <= (it - 1)->hi;
}

uint8_t combiningClass(uint32_t cp) {
  const CombiningClassRange *begin = std::begin(kCombiningClass);
  const CombiningClassRange *it = std::upper_bound(
      begin, std::end(kCombiningClass), cp,
      [](uint32_t c, const CombiningClassRange &r) { return c < r.lo; });
  return it != begin && cp <= (it - 1)->hi ? (it - 1)->ccc : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t> &out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount)
      out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition *end = std::end(kDecompositions);
  const Decomposition *it = std::lower_bound(
      std::begin(kDecompositions), end, cp,
      [](const Decomposition &d, uint32_t c) { return d.cp < c; });
  if (it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  out.insert(out.end(), kDecompositionData + it->offset,
             kDecompositionData + it->offset + it->length);
}

std::optional<uint32_t> compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase &&
      b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 &&
      b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const Composition *end = std::end(kCompositions);
  const Composition *it = std::lower_bound(
      std::begin(kCompositions), end, std::make_pair(a, b),
      [](const Composition &c, const std::pair<uint32_t, uint32_t> &k) {
        return std::make_pair(c.first, c.second) < k;
      });
  if (it == end || it->first != a || it->second != b)
    return std::nullopt;
  return it->composite;
}

/// Normalizes \p cps in place: decomposition, canonical ordering, composition.
void normalizeRun(std::vector<uint32_t> &cps) {
  std::vector<uint32_t> d;
  d.reserve(cps.size() + 4);
  for (uint32_t cp : cps)
    decompose(cp, d);
  struct Mark {
    uint32_t cp;
    uint8_t ccc;
  };
  std::vector<Mark> marks;
  marks.reserve(d.size());
  for (uint32_t cp : d)
    marks.push_back({cp, combiningClass(cp)});
  // Canonical ordering: each run of non-starters sorted by class, stably.
  for (size_t i = 0; i < marks.size();) {
    if (marks[i].ccc == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < marks.size() && marks[j].ccc != 0)
      ++j;
    std::stable_sort(
        marks.begin() + i, marks.begin() + j,
        [](const Mark &x, const Mark &y) { return x.ccc < y.ccc; });
    i = j;
  }
  // Canonical composition: a code point joins the last starter unless a
  // code point between them has class 0 or a class not below its own.
  cps.clear();
  size_t starter = SIZE_MAX;
  int lastClass = -1; // class of the last code point kept after the starter
  for (const Mark &m : marks) {
    if (starter != SIZE_MAX && (lastClass == -1 || lastClass < m.ccc)) {
      if (auto c = compose(cps[starter], m.cp)) {
        cps[starter] = *c;
        continue;
      }
    }
    if (m.ccc == 0) {
      starter = cps.size();
      lastClass = -1;
    } else {
      lastClass = m.ccc;
    }
    cps.push_back(m.cp);
  }
}

} // namespace

const char *nfcUnicodeVersion() { return kNfcUnicodeVersion; }

std::string nfc(std::string_view text) {
  // Every code point below U+0300 is stable; their UTF-8 lead bytes are all
  // below 0xCC.
  if (std::none_of(text.begin(), text.end(), [](char c) {
        return static_cast<unsigned char>(c) >= 0xCC;
      }))
    return std::string(text);
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  std::vector<uint32_t> run, original;
  size_t runStart = 0;
  auto flush = [&](size_t end) {
    if (original.size() > 1 ||
        (original.size() == 1 && isUnstable(original[0]))) {
      run = original;
      normalizeRun(run);
      if (run != original) {
        for (uint32_t cp : run)
          appendUtf8(out, cp);
        original.clear();
        runStart = end;
        return;
      }
    }
    out.append(text, runStart, end - runStart);
    original.clear();
    runStart = end;
  };
  size_t i = 0;
  while (i < text.size()) {
    size_t at = i;
    uint32_t cp = decodeUtf8(text, i);
    bool invalid = cp == 0xFFFD && i - at == 1;
    if (invalid || !isUnstable(cp))
      flush(at);
    if (invalid) {
      flush(i); // the byte itself, as it is
      continue;
    }
    original.push_back(cp);
  }
  flush(text.size());
  return out;
}

} // namespace cac::rt
