#!/usr/bin/env python3
"""Partial credit for the reversal task, as a `reward = command(...)` program.

Reads one JSON line per completion on its standard input and writes one line
back, the reward: 1 for the exact reversal, else the fraction of the
answer's letters that the completion has in the right place, halved (so that
only an exact answer reaches 1 and counts as correct in the eval). Each answer
is flushed before the next completion comes.
"""
import json
import sys


def score(completion: str, answer: str) -> float:
    got = completion.strip()
    if got == answer:
        return 1.0
    right = sum(1 for a, b in zip(got, answer) if a == b)
    return 0.5 * right / max(len(answer), len(got), 1)


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        print(score(request["completion"], request["answer"]), flush=True)


if __name__ == "__main__":
    main()
