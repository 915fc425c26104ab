"""long_rows.py METHOD OUT.json: a batch of few long sequences for METHOD in the
`cac eval` JSON format, shaped for seq-split (docs/pipeline.md, "Splitting long
sequences"): ragged lengths that are not multiples of a tile (1000, 777, 513),
rows of 1 and 2 tokens, so that a sequence is cut over several
blocks, a part ends inside a tile, and parts fall past a sequence's end."""

import json
import random
import sys

# Each method's token and seq inputs (`group` is a group id per sequence).
INPUTS = {
    "gae": (["value"], ["reward"]),
    "sae": (["value", "logp"], ["reward"]),
    "gae_dense": (["value", "reward"], []),
    "vapo_gae": (["value"], ["reward"]),
    "forward_scans": (["value"], ["reward"]),
    "grpo": (["logp"], ["reward", "group"]),  # logp: the lengths only
    "rloo": (["logp"], ["reward", "group"]),
}

method, out = sys.argv[1], sys.argv[2]
rng = random.Random(11)
lengths = [1000, 1, 777, 2, 513]
token, seq = INPUTS[method]


def token_value(name):
    if name.startswith("logp"):
        return -3.0 * rng.random()  # probabilities on both sides of SAE's 0.2
    return rng.uniform(-1.0, 1.0)


batch = {"token": {n: [[token_value(n) for _ in range(t)] for t in lengths]
                   for n in token},
         "seq": {}}
for n in seq:
    if n == "group":
        batch["seq"][n] = [i % 2 for i in range(len(lengths))]
    else:
        batch["seq"][n] = [rng.choice([0.0, 0.5, 1.0]) for _ in lengths]
json.dump(batch, open(out, "w"))
