#!/usr/bin/env python3
"""Share of an RL training step spent in each phase (docs/benchmarks.md).

Reads the metrics.jsonl that cac-run writes and sums, over the RL rows, the
per-phase timings of each step: generation (sampling and rewards), scoring
(rollout-time values and reference log-probabilities), the estimator (packing
the batch, the compiled kernels, reading the outputs) and the update (PPO
epochs); "other" is the rest of time_step_s. Prints a Markdown table.

    build/bin/cac-run examples/arith/train.cac --out /tmp/arith
    bench/train/phases.py /tmp/arith/metrics.jsonl
"""
import argparse
import json
import statistics

PHASES = [("generation", "time_gen_s"), ("scoring", "time_score_s"),
          ("estimator", "time_estimator_s"), ("update", "time_update_s")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("metrics", help="metrics.jsonl of a cac-run run")
    args = ap.parse_args()
    rows = []
    with open(args.metrics) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                if r.get("phase") == "rl":
                    rows.append(r)
    if not rows:
        raise SystemExit(f"{args.metrics}: no RL rows")
    missing = [k for _, k in PHASES + [("step", "time_step_s")]
               if any(k not in r for r in rows)]
    if missing:
        raise SystemExit(f"{args.metrics}: RL rows without {', '.join(missing)}"
                         " (a cac-run older than time_score_s?)")
    total = sum(r["time_step_s"] for r in rows)
    print(f"{len(rows)} RL steps, {total:.2f} s in all, "
          f"{total / len(rows) * 1e3:.1f} ms per step on average\n")
    print("| phase | total s | share of the step | median ms per step | "
          "max ms per step |")
    print("| --- | --- | --- | --- | --- |")
    rest = [r["time_step_s"] - sum(r[k] for _, k in PHASES) for r in rows]
    for name, values in [(n, [r[k] for r in rows]) for n, k in PHASES] + \
            [("other", rest)]:
        s = sum(values)
        print(f"| {name} | {s:.3f} | {100 * s / total:.3f}% | "
              f"{statistics.median(values) * 1e3:.2f} | "
              f"{max(values) * 1e3:.2f} |")


if __name__ == "__main__":
    main()
