"""The examples of docs/python.md run and learn."""

import importlib.util

from conftest import REPO


def _module(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ppo_with_sae_learns_the_toy_task():
    ppo_sae = _module(REPO / "examples" / "python" / "ppo_sae.py")
    rewards = ppo_sae.train(steps=30, seed=1, log=lambda _: None)
    assert rewards[0] < 0.3
    assert sum(rewards[-5:]) / 5 > 0.7
