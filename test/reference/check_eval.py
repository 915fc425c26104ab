#!/usr/bin/env python3
"""Compares `cac eval` against the independent Python reference (cacref.py) on random batches.

For every method and seed it draws a random ragged batch (cacref.random_batch), writes it to a
temporary JSON file, runs each backend once on a method's batches

    CAC eval STDLIB/METHOD.cac --input seed1.json --input seed2.json ... --backend BACKEND

(kernels compiled and LibTorch loaded once; a batch that fails is rerun alone to name it),
and compares every output the reference knows with the JSON that cac prints: each number must
satisfy |got - want| <= tol * max(1, |want|); integer outputs (segment starts, group ids) and
all shapes must match exactly. One line per case, then "N passed, M failed"; exit status 1
when a case fails.

    check_eval.py --cac build/bin/cac --method gae --backend cpu --seeds 1-20 --max-len 4096

--method and --backend take comma lists (and --method all). Failing batches and cac's
output are kept in a directory printed at the end (or in --keep DIR, which keeps all).

--objective NAME (provisional, until `cac eval` evaluates objectives): runs STDLIB/NAME.cac on
cacref.random_objective_batch batches and compares {"loss": x, "grad": {domain: {var: ...}}}.
"""

import argparse
import concurrent.futures
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cacref  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_seeds(text):
    """"1-20", "3", "1,4,9-12" -> a list of ints."""
    seeds = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            seeds.extend(range(int(lo), int(hi) + 1))
        else:
            seeds.append(int(part))
    if not seeds:
        raise argparse.ArgumentTypeError(f"no seeds in {text!r}")
    return seeds


class Comparison:
    """Accumulates the largest error and the mismatches of one case."""

    def __init__(self, tol):
        self.tol = tol
        self.max_err = 0.0
        self.count = 0
        self.mismatches = []

    def fail(self, path, msg):
        self.mismatches.append(f"{path}: {msg}")

    def compare(self, want, got, path):
        if isinstance(want, bool):
            want = float(want)
        if isinstance(want, dict):
            if not isinstance(got, dict):
                return self.fail(path, f"expected an object, got {type(got).__name__}")
            for k in want:
                if k not in got:
                    self.fail(f"{path}.{k}" if path else k, "missing from cac's output")
                else:
                    self.compare(want[k], got[k], f"{path}.{k}" if path else k)
        elif isinstance(want, list):
            if not isinstance(got, list):
                return self.fail(path, f"expected an array, got {json.dumps(got)[:40]}")
            if len(got) != len(want):
                return self.fail(path, f"length {len(got)}, expected {len(want)}")
            for i, (w, g) in enumerate(zip(want, got)):
                self.compare(w, g, f"{path}[{i}]")
        elif isinstance(want, int):
            self.count += 1
            if not (isinstance(got, (int, float)) and not isinstance(got, bool) and got == want):
                self.fail(path, f"got {got!r}, expected exactly {want}")
        else:
            self.count += 1
            if not isinstance(got, (int, float)) or isinstance(got, bool) or not math.isfinite(got):
                return self.fail(path, f"got {got!r}, expected {want!r}")
            err = abs(got - want) / max(1.0, abs(want))
            self.max_err = max(self.max_err, err)
            if err > self.tol:
                self.fail(path, f"got {got!r}, expected {want!r} (error {err:.3g})")


def is_estimator_file(directory, method):
    path = os.path.join(directory, f"{method}.cac")
    if not os.path.isfile(path):
        return False
    with open(path) as f:
        return any(line.startswith("estimator ") for line in f)


def expected_outputs(method, ref, got):
    """The part of the reference output that cac must reproduce: the method's outputs (the
    optional ones only when cac prints them), "segments" for segmenting methods, and
    "groups" when cac prints it."""
    want = {}
    _, _, _, required, optional = cacref.METHODS[method]
    for dom, name in required + optional:
        if dom == "segments":
            want["segments"] = ref["segments"]
            continue
        if (dom, name) in optional and name not in (got.get(dom) or {}):
            continue
        want.setdefault(dom, {})[name] = ref[dom][name]
    if isinstance(got, dict) and "groups" in got:
        want["groups"] = ref["groups"]
    return want


def make_case(args, kind, name, seed):
    """The batch of one (name, seed) and the reference's answer on it."""
    if kind == "method":
        if args.params == "edge":
            batch = cacref.edge_batch(name, seed, args.max_len, args.num_seqs)
        else:
            batch = cacref.random_batch(name, seed, args.max_len, args.num_seqs,
                                        args.params, args.node_order)
        return batch, cacref.evaluate(name, batch)
    batch = cacref.random_objective_batch(name, seed, args.max_len, args.num_seqs)
    return batch, cacref.objective(name, batch)


def cac_command(args, name, backend, batch_paths):
    cac_file = os.path.join(args.stdlib, f"{name}.cac")
    cmd = [args.cac, "eval", cac_file]
    for path in batch_paths:
        cmd += ["--input", path]
    return cmd + ["--backend", backend] + args.cac_arg


def check_output(args, kind, name, seed, backend, batch, ref, got, batch_path, out_path):
    """Compares cac's output on one batch with the reference; returns (ok, line, files to
    keep on failure)."""
    tag = f"{name} seed={seed} backend={backend}"
    want = expected_outputs(name, ref, got) if kind == "method" else ref
    cmp = Comparison(args.tol)
    cmp.compare(want, got, "")
    B = len(cacref.Batch(batch).lengths)
    N = sum(cacref.Batch(batch).lengths)
    info = f"B={B} tokens={N} values={cmp.count} max_err={cmp.max_err:.3g}"
    if cmp.mismatches:
        more = len(cmp.mismatches) - args.show
        lines = [f"FAIL {tag} {info}: {len(cmp.mismatches)} mismatches"]
        lines += [f"    {m}" for m in cmp.mismatches[:args.show]]
        if more > 0:
            lines.append(f"    ... and {more} more")
        return False, "\n".join(lines), [batch_path, out_path]
    return True, f"PASS {tag} {info}", []


def run_backend(args, kind, name, seed, backend, batch, ref, batch_path):
    """Runs cac on one batch and backend; returns (ok, line, files to keep on failure)."""
    tag = f"{name} seed={seed} backend={backend}"
    out_path = batch_path[:-len(".json")] + f"-{backend}.out.json"
    try:
        proc = subprocess.run(cac_command(args, name, backend, [batch_path]),
                              capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return False, f"FAIL {tag}: cac timed out after {args.timeout} s", [batch_path]
    with open(out_path, "w") as f:
        f.write(proc.stdout)
    if proc.returncode != 0:
        err = (proc.stderr.strip().splitlines() or ["(no message)"])[-3:]
        return False, (f"FAIL {tag}: cac exited with {proc.returncode}: " + " | ".join(err)), \
            [batch_path, out_path]
    try:
        got = json.loads(proc.stdout, parse_constant=cacref.reject_non_json)
    except (json.JSONDecodeError, ValueError) as e:
        return False, f"FAIL {tag}: cac printed invalid JSON ({e})", [batch_path, out_path]
    return check_output(args, kind, name, seed, backend, batch, ref, got, batch_path, out_path)


def run_backend_on_all(args, kind, name, backend, cases):
    """Runs cac once on every batch of `cases` (seed, batch, ref, batch_path), as several
    --input files: the kernels are compiled and LibTorch loaded once. Returns the result of
    each case in order; if that call fails, each batch runs alone, so that the failure is
    reported with its batch."""
    paths = [c[3] for c in cases]
    try:
        proc = subprocess.run(cac_command(args, name, backend, paths), capture_output=True,
                              text=True, timeout=args.timeout * len(cases))
        outs = (json.loads(proc.stdout, parse_constant=cacref.reject_non_json)
                if proc.returncode == 0 else None)
    except (subprocess.TimeoutExpired, json.JSONDecodeError, ValueError):
        outs = None
    if len(cases) == 1 or not isinstance(outs, list) or len(outs) != len(cases):
        return [run_backend(args, kind, name, seed, backend, batch, ref, path)
                for seed, batch, ref, path in cases]
    results = []
    for (seed, batch, ref, path), got in zip(cases, outs):
        out_path = path[:-len(".json")] + f"-{backend}.out.json"
        with open(out_path, "w") as f:
            json.dump(got, f)
        results.append(check_output(args, kind, name, seed, backend, batch, ref, got, path,
                                    out_path))
    return results


def run_cases(args, kind, name, seeds, backends, workdir):
    """One name on some seeds: each seed's batch and reference once, then each backend on
    all of them in one cac call. Returns a list of (ok, line, files to keep on failure), by
    seed then backend. Runs in a worker process (the reference is pure Python, so threads
    would share one core)."""
    results = {}
    cases = []
    for seed in seeds:
        try:
            batch, ref = make_case(args, kind, name, seed)
        except cacref.RefError as e:
            results[seed] = [(False, f"FAIL {name} seed={seed} backend={b}: the reference "
                              f"rejected its own batch: {e}", []) for b in backends]
            continue
        batch_path = os.path.join(workdir, f"{name}-seed{seed}.json")
        with open(batch_path, "w") as f:
            json.dump(batch, f)
        cases.append((seed, batch, ref, batch_path))
        results[seed] = []
    for backend in backends:
        if cases:
            for (seed, *_), r in zip(cases, run_backend_on_all(args, kind, name, backend,
                                                                cases)):
                results[seed].append(r)
    return [r for seed in seeds for r in results[seed]]


def chunks(seeds, n):
    """`seeds` in n consecutive parts of nearly equal length (none empty)."""
    n = max(1, min(n, len(seeds)))
    size, extra = divmod(len(seeds), n)
    parts, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        parts.append(seeds[start:end])
        start = end
    return parts


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Compare `cac eval` with the Python reference on random batches.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--cac", required=True, help="path to the cac binary")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--method", help="method name(s), comma separated, or 'all': "
                      + ", ".join(cacref.METHODS))
    what.add_argument("--objective", help="(provisional) objective name(s), comma separated: "
                      + ", ".join(cacref.OBJECTIVES))
    ap.add_argument("--backend", default="eager", help="eager, cpu, or a comma list")
    ap.add_argument("--seeds", type=parse_seeds, default=parse_seeds("1-20"),
                    help="e.g. 1-20 or 1,5,9-12 (default 1-20)")
    ap.add_argument("--max-len", type=int, default=4096, help="longest sequence (default 4096)")
    ap.add_argument("--num-seqs", type=int, default=None,
                    help="sequences per batch (default: random 1..24; leaves for trees)")
    ap.add_argument("--tol", type=float, default=1e-5,
                    help="|got - want| <= tol * max(1, |want|) (default 1e-5)")
    ap.add_argument("--stdlib", default=os.path.join(REPO, "stdlib"),
                    help="directory of the METHOD.cac files (default: the repo's stdlib/)")
    ap.add_argument("--params", choices=["mixed", "default", "random", "edge"], default="mixed",
                    help="parameters: defaults (odd seeds) and random variants (even seeds) "
                         "by default; edge: cacref.edge_batch (no epsilon on zero spreads, "
                         "trees of equal rewards, deep chains; grpo, treeadv, spo_tree)")
    ap.add_argument("--node-order", choices=["shuffled", "bfs"], default="shuffled",
                    help="node ids of random trees: shuffled (default) or breadth-first")
    ap.add_argument("--cac-arg", action="append", default=[],
                    help="an extra argument of cac eval, e.g. --cac-arg=--seq-block=8 "
                         "(repeatable)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per cac run")
    ap.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1),
                    help="worker processes; each runs one method on some seeds")
    ap.add_argument("--keep", help="keep every batch and output in this directory")
    ap.add_argument("--show", type=int, default=5, help="mismatches printed per case")
    args = ap.parse_args(argv)

    if not (os.path.isfile(args.cac) and os.access(args.cac, os.X_OK)):
        print(f"check_eval: {args.cac} is not an executable file", file=sys.stderr)
        return 2
    if args.method:
        kind = "method"
        # "all": the methods whose file in --stdlib is an estimator (as scripts/test.sh picks
        # them; group_ops lives in test/reference/lang, gspo is an objective).
        names = ([m for m in cacref.METHODS if is_estimator_file(args.stdlib, m)]
                 if args.method == "all" else args.method.split(","))
        known = cacref.METHODS
    else:
        kind = "objective"
        names = args.objective.split(",")
        known = cacref.OBJECTIVES
    for n in names:
        if n not in known:
            print(f"check_eval: unknown {kind} {n}; known: {', '.join(known)}", file=sys.stderr)
            return 2
        if not os.path.isfile(os.path.join(args.stdlib, f"{n}.cac")):
            print(f"check_eval: {os.path.join(args.stdlib, n + '.cac')} does not exist",
                  file=sys.stderr)
            return 2
    backends = args.backend.split(",")

    workdir = args.keep or tempfile.mkdtemp(prefix="cac-check-")
    os.makedirs(workdir, exist_ok=True)
    # Each name's seeds in as few parts as keep every worker busy: a part's batches run in
    # one cac call per backend.
    jobs = max(1, args.jobs)
    parts = -(-2 * jobs // len(names))
    work = [(n, part) for n in names for part in chunks(args.seeds, parts)]
    passed = failed = 0
    kept = []
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_cases, args, kind, n, part, backends, workdir)
                   for n, part in work]
        for fut in futures:  # in submission order: deterministic output
            for ok, line, files in fut.result():
                print(line, flush=True)
                if ok:
                    passed += 1
                else:
                    failed += 1
                    kept += files
    if not args.keep:
        if kept:
            for name in os.listdir(workdir):
                if os.path.join(workdir, name) not in kept:
                    os.remove(os.path.join(workdir, name))
            print(f"failing batches and cac outputs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
