"""Bad input: a Python exception that names the input and the expected
shape, never a crash; compile errors carry the file:line:col diagnostic."""

import re

import pytest
import torch

import cac
from conftest import STDLIB

MASK = torch.tensor([[1, 1, 0, 1, 0, 0], [1, 1, 1, 0, 0, 0]])
V = torch.rand(2, 6)
R = torch.tensor([1.0, 0.0])


@pytest.fixture(scope="module")
def gae():
    return cac.load(STDLIB / "gae.cac")


def test_wrong_token_shape(gae):
    with pytest.raises(ValueError, match=r"input 'value' \(token\): expected \[B, T\] = \[2, 6\]"
                                         r".*got shape \[2, 7\]"):
        gae(value=torch.rand(2, 7), reward=R, mask=MASK)


def test_wrong_seq_shape(gae):
    with pytest.raises(ValueError, match=r"input 'reward' \(seq\): expected \[B\] = \[2\], "
                                         r"got shape \[3\]"):
        gae(value=V, reward=torch.rand(3), mask=MASK)


def test_packed_shape(gae):
    with pytest.raises(ValueError, match=r"'value' \(token\): expected \[N\] = \[7\] \(packed\)"):
        gae(value=torch.rand(8), reward=R, lengths=torch.tensor([3, 4]))


@pytest.mark.parametrize("bad", [torch.rand(2, 6, dtype=torch.complex64),
                                 torch.rand(2, 6).half()])
def test_wrong_dtype(gae, bad):
    with pytest.raises(TypeError, match=r"input 'value' has dtype .*expected float32 or float64"):
        gae(value=bad, reward=R, mask=MASK)


def test_mixed_precision(gae):
    with pytest.raises(TypeError, match=r"'value' \(float32\) and 'reward' \(float64\)"):
        gae(value=V, reward=R.double(), mask=MASK)


def test_not_a_tensor(gae):
    with pytest.raises(TypeError, match=r"input 'value' must be a torch.Tensor, got str"):
        gae(value="values", reward=R, mask=MASK)


def test_wrong_device(gae):
    with pytest.raises(ValueError, match=r"input 'reward' is on cpu but 'value' is on meta"):
        gae(value=torch.empty(2, 6, device="meta"), reward=R, mask=MASK)
    with pytest.raises(ValueError, match=r"'mask' is on meta; cac runs on CPU or CUDA"):
        gae(value=V, reward=R, mask=torch.ones(2, 6, device="meta"))
    with pytest.raises(ValueError, match=r"'value' is on meta; cac runs on CPU or CUDA"):
        gae(value=torch.empty(2, 6, device="meta"), reward=R.to("meta"), mask=MASK)


def test_missing_and_unknown_inputs(gae):
    with pytest.raises(TypeError, match=r"missing input 'reward' \(seq: \[B\] = \[2\]\)"):
        gae(value=V, mask=MASK)
    with pytest.raises(TypeError, match=r"unknown input 'rewards' \(inputs: value, reward\)"):
        gae(value=V, reward=R, rewards=R, mask=MASK)
    with pytest.raises(TypeError, match=r"missing mask=\[B, T\]"):
        gae(value=V, reward=R)


def test_row_without_action_token(gae):
    mask = MASK.clone()
    mask[1] = 0
    with pytest.raises(ValueError, match=r"mask: sequence 1 has no action token"):
        gae(value=V, reward=R, mask=mask)
    with pytest.raises(ValueError, match=r"lengths: sequence 0 has no action token"):
        gae(value=torch.rand(3), reward=R, lengths=torch.tensor([0, 3]))


def test_mask_shape(gae):
    with pytest.raises(ValueError, match=r"mask: expected \[B, T\], got shape \[12\]"):
        gae(value=V, reward=R, mask=MASK.flatten())


def test_unknown_and_missing_parameters():
    with pytest.raises(ValueError, match=r"unknown parameter 'lamda' \(parameters: gamma, lambda\)"):
        cac.load(STDLIB / "gae.cac", params={"lamda": 0.9})
    with pytest.raises(ValueError, match=r"missing required parameter 'lambda'"):
        cac.load(STDLIB / "sae.cac")
    with pytest.raises(TypeError, match=r"parameter 'gamma' must be a number"):
        cac.load(STDLIB / "gae.cac", params={"gamma": "high"})


def test_groups():
    grpo = cac.load(STDLIB / "grpo.cac")
    lengths = torch.tensor([2, 3])
    with pytest.raises(TypeError, match=r"missing input 'group' \(\[B\] = \[2\]"):
        grpo(reward=R, lengths=lengths)
    with pytest.raises(ValueError, match=r"group: expected \[B\] = \[2\] ids, got 3"):
        grpo(reward=R, lengths=lengths, group=["a", "b", "c"])
    with pytest.raises(TypeError, match=r"group has dtype torch.float32"):
        grpo(reward=R, lengths=lengths, group=torch.tensor([0.5, 1.5]))
    # The batch's groups are structure: a method without groups ignores them.
    gae = cac.load(STDLIB / "gae.cac")
    assert torch.equal(gae(value=V, reward=R, mask=MASK, group=["a", "b"])["adv"],
                       gae(value=V, reward=R, mask=MASK)["adv"])


def test_tree():
    tree = cac.load(STDLIB / "spo_tree.cac")
    lengths = torch.tensor([2, 2])
    logp = -torch.rand(4)
    with pytest.raises(TypeError, match=r"missing input 'tree_parent'"):
        tree(logp=logp, reward=R, lengths=lengths)
    with pytest.raises(ValueError, match=r"cycle"):
        tree(logp=logp, reward=R, lengths=lengths, tree_parent=torch.tensor([1, 2, 0]),
             tree_node=torch.tensor([0, 1, 0, 2]))
    with pytest.raises(ValueError, match=r"tree_node: expected integer \[N\] = \[4\]"):
        tree(logp=logp, reward=R, lengths=lengths, tree_parent=torch.tensor([-1, 0]),
             tree_node=torch.tensor([0, 1, 1]))


def test_segment_counts():
    vine = cac.load(STDLIB / "vineppo.cac")
    newline = torch.tensor([[0, 1, 0, 0], [0, 0, 0, 1]])
    mask = torch.ones(2, 4)
    with pytest.raises(ValueError, match=r"input 'mc_value' \(seg\): sequence 0 has 1 segment "
                                         r"values but the estimator's segments split it into 2"):
        vine(newline=newline, reward=R, mc_value=torch.rand(2, 2), mask=mask,
             seg_count=torch.tensor([1, 1]))
    with pytest.raises(ValueError, match=r"seg_count\[1\] = 5 but sequence 1 has 4"):
        vine(newline=newline, reward=R, mc_value=torch.rand(2, 5), mask=mask,
             seg_count=torch.tensor([2, 5]))


def test_objective_errors():
    obj = cac.load(STDLIB / "ppo_clip.cac")
    with pytest.raises(TypeError, match=r"missing input 'logp_new'"):
        obj.loss(logp=V, adv=V, mask=MASK)
    with pytest.raises(ValueError, match=r"aggregation must be one of"):
        obj.loss(logp_new=V, logp=V, adv=V, mask=MASK, aggregation="mean")
    with pytest.raises(ValueError, match=r"aggregation must be one of"):
        cac.load(STDLIB / "ppo_clip.cac", params={"aggregation": "sum"})


def test_compile_error_carries_the_diagnostic(tmp_path):
    bad = tmp_path / "bad.cac"
    bad.write_text("estimator bad {\n  input r : seq\n  output a : token = r + foo\n}\n")
    with pytest.raises(cac.CompileError) as e:
        cac.load(bad, cache_dir=tmp_path / "cache")
    assert f"{bad}:3:26: error: unknown name 'foo'" in str(e.value)
    assert isinstance(e.value, ValueError)
    with pytest.raises(FileNotFoundError, match="no such .cac file"):
        cac.load(tmp_path / "missing.cac")


def test_missing_compiler(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        cac.load(STDLIB / "gae.cac", compiler=tmp_path / "no-cac", cache_dir=tmp_path)


def test_out_tensors(gae):
    with pytest.raises(TypeError, match=r"out must be a dict"):
        gae(value=V, reward=R, mask=MASK, out=[torch.empty(2, 6)])
    with pytest.raises(TypeError, match=r"gae: out has unknown output 'advantage' \(outputs: adv, ret\)"):
        gae(value=V, reward=R, mask=MASK, out={"advantage": torch.empty(2, 6)})
    with pytest.raises(TypeError, match=r"out\['adv'\] must be a torch.Tensor, got list"):
        gae(value=V, reward=R, mask=MASK, out={"adv": [0.0] * 12})
    want = r"gae: out\['adv'\] \(token\): expected a contiguous torch.float32 tensor of shape \[2, 6\] on cpu, got "
    bad = {"shape [2, 7]": torch.empty(2, 7),
           "dtype torch.float64": torch.empty(2, 6, dtype=torch.float64),
           "device meta": torch.empty(2, 6, device="meta"),
           "a non-contiguous tensor": torch.empty(6, 2).t(),
           "a tensor that requires grad": torch.empty(2, 6, requires_grad=True)}
    for problem, t in bad.items():
        with pytest.raises(ValueError, match=want + re.escape(problem)):
            gae(value=V, reward=R, mask=MASK, out={"adv": t})
    with pytest.raises(ValueError, match=r"expected a contiguous torch.float32 tensor of shape \[6\]"):
        gae(value=V[MASK != 0], reward=R, lengths=MASK.sum(1), out={"ret": torch.empty(2, 6)})
