"""Reads cac eval's output as strict JSON (NaN and Infinity are errors) and
prints each output as `domain.name[row] = v v ...` (null as `null`)."""
import json
import sys


def reject(name):
    sys.exit(f"not JSON: {name}")


def text(v):
    return "null" if v is None else repr(v)


doc = json.load(sys.stdin, parse_constant=reject)
for domain in ("token", "seq", "node", "group"):
    for name, value in sorted(doc.get(domain, {}).items()):
        if value and isinstance(value[0], list):
            for i, row in enumerate(value):
                print(f"{domain}.{name}[{i}] = " + " ".join(text(v) for v in row))
        else:
            print(f"{domain}.{name} = " + " ".join(text(v) for v in value))
