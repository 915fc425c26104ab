#!/usr/bin/env python3
"""A tool program for `tools = command(..)` (docs/training.md, "Tool programs").

Integer arithmetic like the built-in calculator: decimal integers, + - * /
(`/` divides rounding toward zero), unary minus and parentheses. Standard
library only.

The protocol: once ready, write {"ready": true}; then for each line of JSON
on standard input, {"call": "12*7", "turn": 1, "prompt": ".."}, write exactly
one line, {"observation": "84"}, or {"observation": "error", "ok": false}
for a call that does not evaluate, and flush it. Diagnostics go to standard
error, never to standard output.

    echo '{"call": "12*7", "turn": 1, "prompt": "12*7="}' | python3 calc_tool.py
"""

import ast
import json
import re
import sys

MAX_CALL = 256


def evaluate(node):
    """The value of an expression tree of integers, + - * / and unary minus."""
    if isinstance(node, ast.Expression):
        return evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -evaluate(node.operand)
    if isinstance(node, ast.BinOp):
        a, b = evaluate(node.left), evaluate(node.right)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if isinstance(node.op, ast.Div):
            if b == 0:
                raise ValueError("division by zero")
            q = abs(a) // abs(b)
            return q if (a < 0) == (b < 0) else -q
    raise ValueError("not integer arithmetic")


def answer(call):
    """The observation of one call and whether it evaluated."""
    text = call.strip()
    if len(text) > MAX_CALL or not text or set(text) - set("0123456789+-*/() "):
        return "error", False
    # Python refuses leading zeros (007); the calculator reads them.
    text = re.sub(r"\b0+(?=[0-9])", "", text)
    try:
        value = evaluate(ast.parse(text, mode="eval"))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "error", False
    if not -(2**63) <= value < 2**63:
        return "error", False
    return str(value), True


def main():
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        observation, ok = answer(request["call"])
        reply = {"observation": observation}
        if not ok:
            reply["ok"] = False
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
