#!/usr/bin/env python3
"""The arithmetic task's reward as a program, for `reward = command(...)`.

cac-run starts the command once (in the training file's folder) and sends it
one JSON line per completion,

    {"answer": "85", "completion": "40+30+7+8=70+15=85", "id": "arith/47+38=",
     "prompt": "47+38="}

and reads one line back: the reward, a number. Each answer must be flushed
before cac-run sends the next completion. This one gives what the built-in
task gives, 1 when the number after the last '=' (or the whole completion
without one) equals the answer, else 0, so a run with it reproduces a run
without it (train_reward_command.cac); change score() to try other rewards.
"""
import json
import re
import sys

INTEGER = re.compile(r"-?[0-9]+")


def score(completion: str, answer: str) -> float:
    stated = completion.strip()
    eq = stated.rfind("=")
    if eq >= 0:
        stated = stated[eq + 1:].strip()
    if not INTEGER.fullmatch(stated):
        return 0.0
    want = float(answer)
    return 1.0 if abs(float(stated) - want) <= 1e-9 * max(1.0, abs(want)) else 0.0


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        print(score(request["completion"], request["answer"]), flush=True)


if __name__ == "__main__":
    main()
