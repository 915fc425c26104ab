#!/usr/bin/env python3
"""Writes train.jsonl and eval.jsonl of the reversal task (train.cac here).

Each line is one problem in cac-run's `jsonl` format: the prompt given to the
model verbatim, the answer the reward compares with, and the solution the SFT
warm start trains on. Words are 3 to 7 random lowercase letters; no eval
word is a training word. Deterministic: the files in the repository are this
script's output.
"""
import json
import random


def words(rng: random.Random, n: int, taken: set) -> list:
    out = []
    while len(out) < n:
        w = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz")
                    for _ in range(rng.randint(3, 7)))
        if w not in taken:
            taken.add(w)
            out.append(w)
    return out


def write(path: str, ws: list) -> None:
    with open(path, "w") as f:
        for w in ws:
            rev = w[::-1]
            f.write(json.dumps({"prompt": f"reverse {w}=", "answer": rev,
                                "solution": rev}) + "\n")


def main() -> None:
    rng = random.Random(1)
    taken: set = set()
    write("eval.jsonl", words(rng, 500, taken))
    write("train.jsonl", words(rng, 4000, taken))


if __name__ == "__main__":
    main()
