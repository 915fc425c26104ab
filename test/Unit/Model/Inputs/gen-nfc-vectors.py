#!/usr/bin/env python3
"""Writes nfc-vectors.json: [input, Python's NFC of it] pairs for
unicode-test.cpp, from the `unicodedata` module of the interpreter that runs
it (the Unicode version is recorded in the file).

  /usr/bin/python3 gen-nfc-vectors.py > nfc-vectors.json

The inputs: every code point that NFC changes, alone; every primary
composite's decomposition and its NFD with marks around it; Hangul syllables
in pieces; and seeded random strings over the code points that normalization
touches (combining marks of many classes, composable starters, jamo,
singletons, excluded composites) mixed with ASCII and stable letters.
"""
import json
import random
import sys
import unicodedata


def code_points():
    for cp in range(0x110000):
        if not 0xD800 <= cp <= 0xDFFF:
            yield cp


def main():
    nfc = lambda s: unicodedata.normalize("NFC", s)
    inputs = []
    interesting = []
    for cp in code_points():
        c = chr(cp)
        touched = nfc(c) != c or unicodedata.normalize("NFD", c) != c or \
            unicodedata.combining(c)
        if nfc(c) != c:
            inputs.append(c)
        if touched:
            interesting.append(c)
    composites = [c for c in interesting
                  if unicodedata.normalize("NFD", c) != c and nfc(c) == c]
    marks = [c for c in interesting if unicodedata.combining(c)]
    rng = random.Random(23)
    for c in composites:
        d = unicodedata.normalize("NFD", c)
        inputs.append(d)
        inputs.append(rng.choice(marks) + d + rng.choice(marks) +
                      rng.choice(marks))
    jamo = [chr(x) for x in list(range(0x1100, 0x1113)) +
            list(range(0x1161, 0x1176)) + list(range(0x11A7, 0x11C3))]
    syllables = [chr(0xAC00 + rng.randrange(11172)) for _ in range(200)]
    for s in syllables:
        inputs.append(unicodedata.normalize("NFD", s))
        inputs.append(s + rng.choice(jamo))
    pool = interesting + jamo + syllables + list("aeiouAEIOU ,.-") + \
        ["\u00e9", "\u0915", "\u3042", "\u05d0", "\u0627"]
    for _ in range(4000):
        n = rng.randrange(1, 12)
        inputs.append("".join(rng.choice(pool) for _ in range(n)))
    # Long runs of marks out of order (canonical ordering at length).
    for _ in range(20):
        inputs.append("a" + "".join(rng.choice(marks) for _ in range(300)))
    # One vector a line.
    out = sys.stdout
    out.write('{"unicode": %s, "python": %s, "vectors": [\n'
              % (json.dumps(unicodedata.unidata_version),
                 json.dumps(sys.version.split()[0])))
    out.write(",\n".join(json.dumps([s, nfc(s)], ensure_ascii=False)
                         for s in inputs))
    out.write("\n]}\n")


if __name__ == "__main__":
    main()
