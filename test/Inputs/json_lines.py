#!/usr/bin/env python3
"""Prints a JSON document (stdin) one leaf per line, `path = value`, so that
FileCheck lines do not depend on how the JSON is indented or how numbers are
spelled. A list of numbers or strings is one leaf, printed `[a, b, c]`; dictionary keys
are sorted. Numbers print as Python's repr (an integral float as an integer).

  --round N   print every number with N decimals (-0 printed as 0), except
              the integers under "segments" and "groups"

Used by the lit tests as %json-lines (see test/lit.cfg.py)."""

import json
import math
import sys


def fmt_scalar(v, digits):
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, (int, float)):
        if isinstance(v, float) and not math.isfinite(v):
            return repr(v)
        if digits is None:
            # 1 and 1.0 print alike: "1".
            if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
                return str(int(v))
            return repr(v)
        s = "%.*f" % (digits, v)
        if float(s) == 0.0:
            s = "%.*f" % (digits, 0.0)
        return s
    return json.dumps(v)


def is_leaf_list(v):
    return isinstance(v, list) and all(not isinstance(x, (list, dict)) for x in v)


# Integer-valued results (segment starts, group ids) are never rounded.
INTEGER_PATHS = ("segments", "groups")


def walk(path, v, digits, out):
    if path.split("[")[0] in INTEGER_PATHS:
        digits = None
    if isinstance(v, dict):
        if not v:
            out.append("%s = {}" % path)
        for k in sorted(v):
            walk("%s.%s" % (path, k) if path else k, v[k], digits, out)
    elif is_leaf_list(v):
        out.append("%s = [%s]" % (path, ", ".join(fmt_scalar(x, digits) for x in v)))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            walk("%s[%d]" % (path, i), x, digits, out)
    else:
        out.append("%s = %s" % (path, fmt_scalar(v, digits)))


def main():
    digits = None
    args = sys.argv[1:]
    if args[:1] == ["--round"]:
        digits = int(args[1])
    text = sys.stdin.read()
    try:
        doc = json.loads(text)
    except ValueError as e:
        sys.stderr.write("json_lines.py: not JSON: %s\n%s\n" % (e, text[:2000]))
        return 1
    out = []
    walk("", doc, digits, out)
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
