"""Checks docs/language.md's tables of built-in functions against Builtins.def.

    python3 builtins_docs.py BUILTINS.def LANGUAGE.md [FUZZ.dict]

Every built-in of the .def must have one row in a table whose header is
`| function | domain | meaning |`, written with its arguments as it takes
them (`f(x)`, `f(a, b)`, `f(x[, fill])` for an optional one, `f` for none;
several names can share the arguments: `f g h (x)`), and with the domain its
rule gives (the rule's "Docs" spelling, "%" being the result's domain). The
tables name no other function; a table headed `| on a seg value | ... |`
may repeat built-ins to describe them on segments. Prints each mismatch and
exits 1 if there is one. With the fuzzer's dictionary, its `fn_NAME`
entries must be the built-ins too, one each.
"""

import re
import sys

RULE = re.compile(r'BUILTIN_RULE\(\s*(\w+)\s*,\s*(true|false)\s*,\s*"([^"]*)"\s*\)')
BUILTIN = re.compile(r'BUILTIN\(\s*(\w+)\s*,\s*"(\w+)"\s*,\s*(\d+)\s*,\s*(\d+)\s*,'
                     r'\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,'
                     r'\s*(\w+)\s*,\s*(\w+)\s*\)')
SIGNATURE = re.compile(r'^([a-z_0-9]+(?:\s+[a-z_0-9]+)*)\s*(?:\((.*)\))?$')
FUNCTION_HEADER = ["function", "domain", "meaning"]
SEG_HEADER = ["on a seg value", "domain", "meaning"]


def read_def(path):
    text = "\n".join(line for line in open(path, encoding="utf-8")
                     if not line.lstrip().startswith(("//", "#")))
    rules = {m.group(1): m.group(3) for m in RULE.finditer(text)}
    builtins = {}
    for m in BUILTIN.finditer(text):
        _, name, lo, hi, rule, domain = m.groups()[:6]
        docs = rules[rule]
        if "%" in docs:
            docs = docs.replace("%", domain.lower())
        builtins[name] = (int(lo), int(hi), docs)
    return builtins


def arity(args):
    """(min, max) of an argument list such as `x[, fill]`."""
    if args is None or not args.strip():
        return 0, 0
    total = len([a for a in re.sub(r"[\[\]]", "", args).split(",") if a.strip()])
    required = len([a for a in re.sub(r"\[.*?\]", "", args).split(",")
                    if a.strip()])
    return required, total


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def read_docs(path):
    """(line number, names, (min, max), domain, seg table?) of every row."""
    rows = []
    header = None
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        if not line.startswith("|"):
            header = None
            continue
        if header is None:
            header = cells(line)
            continue
        if header not in (FUNCTION_HEADER, SEG_HEADER) or line.startswith("| ---"):
            continue
        row = cells(line)
        for span in re.findall(r"`([^`]*)`", row[0]):
            m = SIGNATURE.match(span.strip())
            if not m:
                rows.append((number, None, span, None, False))
                continue
            rows.append((number, m.group(1).split(), arity(m.group(2)),
                         row[1], header == SEG_HEADER))
    return rows


def check_dict(path, builtins):
    """The `fn_NAME="..."` entries of a libFuzzer dictionary."""
    names = re.findall(r"^fn_(\w+)=", open(path, encoding="utf-8").read(), re.M)
    errors = ["%s: fn_%s is not a built-in of the .def" % (path, n)
              for n in names if n not in builtins]
    errors += ["%s: the built-in '%s' has no fn_%s entry" % (path, n, n)
               for n in builtins if n not in names]
    return errors


def main():
    builtins = read_def(sys.argv[1])
    docs = sys.argv[2]
    errors = check_dict(sys.argv[3], builtins) if len(sys.argv) > 3 else []
    seen = {}
    for number, names, shape, domain, seg in read_docs(docs):
        if names is None:
            errors.append("%s:%d: cannot read `%s` as built-ins and their "
                          "arguments" % (docs, number, shape))
            continue
        for name in names:
            if name not in builtins:
                errors.append("%s:%d: '%s' is not a built-in of the .def"
                              % (docs, number, name))
                continue
            if seg:
                continue
            if name in seen:
                errors.append("%s:%d: '%s' is already listed on line %d"
                              % (docs, number, name, seen[name]))
                continue
            seen[name] = number
            lo, hi, want = builtins[name]
            if shape != (lo, hi):
                errors.append("%s:%d: '%s' is written with %d to %d arguments "
                              "but takes %d to %d" % (docs, number, name,
                                                      shape[0], shape[1], lo, hi))
            if domain != want:
                errors.append("%s:%d: '%s' has domain '%s' but its rule says "
                              "'%s'" % (docs, number, name, domain, want))
    for name in builtins:
        if name not in seen:
            errors.append("%s: the built-in '%s' is missing from the tables"
                          % (docs, name))
    for e in errors:
        print("builtins-docs: " + e)
    if errors:
        return 1
    print("builtins-docs: %d built-ins documented" % len(builtins))
    return 0


if __name__ == "__main__":
    sys.exit(main())
