"""tree_forest.py METHOD OUT.json: a tree batch for METHOD (treeadv or spo_tree)
in the `cac eval` JSON format, shaped for the tree builder's parallel paths
(docs/pipeline.md, Trees): 300 small trees (more roots than a block has
threads), a star of 300 children, sequences sharing their leaf, a sequence
ending at an inner node, and a chain 1500 nodes deep; node ids shuffled."""

import json
import random
import sys

method, out = sys.argv[1], sys.argv[2]
rng = random.Random(5)
parent, paths = [], []  # paths: per sequence, its root-to-leaf node list


def node(p):
    parent.append(p)
    return len(parent) - 1


for _ in range(300):
    r = node(-1)
    for _ in range(rng.randint(1, 3)):
        paths.append([r, node(r)])
star = node(-1)
for _ in range(300):
    paths.append([star, node(star)])
shared = node(-1)
mid = node(shared)
leaf = node(mid)
for _ in range(3):
    paths.append([shared, mid, leaf])
paths.append([shared, mid])  # ends at an inner node
paths.append([shared, mid, node(mid)])
chain = [node(-1)]
for _ in range(1499):
    chain.append(node(chain[-1]))
    if rng.random() < 0.01:
        paths.append(chain + [node(chain[-1])])
paths.append(list(chain))

perm = list(range(len(parent)))
rng.shuffle(perm)
new_parent = [0] * len(parent)
for n, p in enumerate(parent):
    new_parent[perm[n]] = perm[p] if p >= 0 else -1
rng.shuffle(paths)
rows = [[perm[n] for n in path] for path in paths]
root_of = lambda path: perm[path[0]]
batch = {"seq": {"reward": [rng.choice([0.0, 0.5, 1.0]) for _ in rows]},
         "tree": {"parent": new_parent, "node": rows}, "token": {}}
if method == "treeadv":
    roots = sorted({root_of(p) for p in paths})
    batch["seq"]["group"] = [roots.index(root_of(p)) for p in paths]
else:
    batch["token"]["logp"] = [[-rng.random() for _ in r] for r in rows]
json.dump(batch, open(out, "w"))
