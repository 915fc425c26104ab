#!/usr/bin/env python3
"""Checks the size rule of the C++ sources: no file over MAX_FILE lines and
no function body over MAX_FUNCTION lines in compiler/, dsl/, eager/, runtime/
and abi/ (generated and vendored files excepted).

    scripts/check-sizes.py [--max-file N] [--max-function N] [--list K]

A function is found as a brace block, outside any other function, whose
opening follows a parenthesised parameter list (constructor initializers and
trailing qualifiers allowed) and no control keyword; lambdas and nested
blocks count towards the function that holds them. --list K prints the K
longest functions as well.
"""
import argparse
import pathlib
import re
import sys

ROOTS = ["compiler", "dsl", "eager", "runtime", "abi"]
SUFFIXES = {".cpp", ".h", ".cc", ".hpp"}
CONTROL = re.compile(r"\b(if|for|while|switch|catch|do|else|return)\b")


def strip(text):
    """Blanks comments, string and character literals, keeping newlines."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """Yields (name, first line, line count) of each function body."""
    code = strip(text)
    depth = 0
    stack = []  # (is_function, start line, name)
    inside = 0  # how many function bodies are open
    last = 0  # start of the text that precedes the next brace
    line = 1
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c == "{":
            head = code[last:i].strip()
            is_fn = False
            name = ""
            if not inside:
                m = re.search(r"([~\w:<>]+)\s*\(", head)
                tail = re.sub(r"\s+", " ", head)
                if (m and ")" in head and not CONTROL.search(tail[-80:]) and
                        not re.search(r"=\s*$", tail) and
                        not tail.startswith(("namespace", "extern"))):
                    is_fn = True
                    name = m.group(1)
            stack.append((is_fn, line, name))
            if is_fn:
                inside += 1
            depth += 1
            last = i + 1
        elif c == "}":
            if stack:
                is_fn, start, name = stack.pop()
                if is_fn:
                    inside -= 1
                    yield name, start, line - start + 1
            depth -= 1
            last = i + 1
        elif c == ";":
            last = i + 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-file", type=int, default=1000)
    ap.add_argument("--max-function", type=int, default=150)
    ap.add_argument("--list", type=int, default=0)
    args = ap.parse_args()
    repo = pathlib.Path(__file__).resolve().parent.parent
    bad = []
    fns = []
    for root in ROOTS:
        for path in sorted((repo / root).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            rel = path.relative_to(repo)
            text = path.read_text(errors="replace")
            lines = text.count("\n")
            if lines > args.max_file:
                bad.append(f"{rel}: {lines} lines (at most {args.max_file})")
            for name, start, count in functions(text):
                fns.append((count, f"{rel}:{start}", name))
                if count > args.max_function:
                    bad.append(f"{rel}:{start}: function '{name}' has "
                               f"{count} lines (at most {args.max_function})")
    fns.sort(reverse=True)
    for count, where, name in fns[:args.list]:
        print(f"{count:5d}  {where}  {name}")
    for b in bad:
        print(f"check-sizes: {b}", file=sys.stderr)
    if bad:
        return 1
    print(f"check-sizes: {len(fns)} functions, none over "
          f"{args.max_function} lines; no file over {args.max_file} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
