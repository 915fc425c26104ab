#!/usr/bin/env python3
"""Runs one example training file with cac-run to its end and checks its metrics.

usage: run-example.py CAC_RUN FILE.cac OUT --rl-steps N [--needs PATH]...
                      [--prompt-prefix TEXT] [--run-arg=ARG]... [--finite KEY]...

OUT is emptied first and removed after a passing run (checkpoints of a
real-vocabulary model are gigabytes). --run-arg passes ARG on to cac-run (its
overrides: `--run-arg=--steps --run-arg=2`). The run passes when cac-run
exits 0 and OUT/metrics.jsonl holds exactly N RL rows, steps 1..N, whose
reward_mean and loss (and each --finite KEY) are finite numbers (a NaN is
written as null), and every eval row's eval_acc is a number in [0, 1], and
with --prompt-prefix every prompt of OUT/samples.jsonl starts with TEXT (a
chat template's frame). Exit 77 (ctest's SKIP_RETURN_CODE) when a
--needs path is missing.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def finite(row, key):
    value = row.get(key)
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        fail(f"RL step {row.get('rl_step')}: {key} is {value!r}, not a finite "
             f"number: {json.dumps(row)}")


def check_metrics(path, rl_steps, keys):
    rl, evals = [], []
    with open(path) as f:
        for line_no, line in enumerate(f, 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                fail(f"{path}:{line_no}: not JSON: {e}")
            if row.get("phase") == "rl":
                rl.append(row)
            elif row.get("phase") == "eval":
                evals.append(row)
    steps = [row.get("rl_step") for row in rl]
    if steps != list(range(1, rl_steps + 1)):
        fail(f"{path}: RL rows of steps {steps}, expected 1..{rl_steps}")
    for row in rl:
        for key in ["reward_mean", "loss"] + keys:
            finite(row, key)
        print(f"RL step {row['rl_step']}: reward_mean {row['reward_mean']} "
              f"loss {row['loss']}")
    for row in evals:
        acc = row.get("eval_acc")
        if not isinstance(acc, (int, float)) or not 0 <= acc <= 1:
            fail(f"{path}: eval row with eval_acc {acc!r}: {json.dumps(row)}")


def check_prompts(path, prefix):
    with open(path) as f:
        prompts = [json.loads(line)["prompt"] for line in f]
    if not prompts:
        fail(f"{path}: no samples")
    for prompt in prompts:
        if not prompt.startswith(prefix):
            fail(f"{path}: the prompt {prompt!r} does not start with "
                 f"{prefix!r}")
    print(f"{len(prompts)} prompts start with {prefix!r}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cac_run")
    parser.add_argument("file")
    parser.add_argument("out")
    parser.add_argument("--rl-steps", type=int, required=True)
    parser.add_argument("--needs", action="append", default=[])
    parser.add_argument("--prompt-prefix")
    parser.add_argument("--run-arg", action="append", default=[])
    parser.add_argument("--finite", action="append", default=[])
    args = parser.parse_args()
    for path in args.needs:
        if not os.path.exists(path):
            print(f"SKIP: {path} is missing (scripts/setup.sh installs it)")
            sys.exit(77)
    shutil.rmtree(args.out, ignore_errors=True)
    # cac-run's progress goes to this test's output; the run ends when the
    # process does.
    rc = subprocess.run([args.cac_run, args.file, "--out", args.out] +
                        args.run_arg).returncode
    if rc != 0:
        fail(f"cac-run {args.file} exited with {rc}")
    check_metrics(os.path.join(args.out, "metrics.jsonl"), args.rl_steps,
                  args.finite)
    if args.prompt_prefix is not None:
        check_prompts(os.path.join(args.out, "samples.jsonl"),
                      args.prompt_prefix)
    shutil.rmtree(args.out)
    print("PASS")


if __name__ == "__main__":
    main()
