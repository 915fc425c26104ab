"""Every stdlib estimator through the package against `cac eval` on the
same random batches (test/reference/cacref.py draws them): padded, packed,
with observation tokens, in float64 and float32."""

import random

import pytest
import torch

import cac
import cacref
from cac import _cac
from check_obs import with_observations
from conftest import (STDLIB, _rows, assert_close, cac_eval, packed_call,
                      padded_call)

ESTIMATORS = ["gae", "gae_dense", "grpo", "rloo", "vineppo", "sae",
              "spo_chain", "spo_tree", "sppo", "treeadv", "sapo"]
SEEDS = [1, 2, 3]

def load(method, params):
    return cac.load(STDLIB / f"{method}.cac", params=params)


def compare(est, out, want, batch, tol, padded=True):
    rows = _rows(batch)
    for name, domain in est.outputs.items():
        what = f"{est.name}.{name}"
        if domain == "token":
            for b, r in enumerate(want["token"][name]):
                if padded:
                    assert_close(out[name][b, :len(r)], r, tol, f"{what}[{b}]")
                    assert (out[name][b, len(r):] == 0).all(), f"{what}[{b}] padding"
            if not padded:
                flat = [x for r in want["token"][name] for x in r]
                assert_close(out[name], flat, tol, what)
        elif domain == "seg":
            for b, starts in enumerate(want["segments"]):
                if padded:
                    got = out[name][b, starts]
                else:
                    begin = sum(len(r) for r in rows[:b])
                    got = out[name][[begin + s for s in starts]]
                assert_close(got, want["seg"][name][b], tol, f"{what}[{b}]")
        else:
            assert_close(out[name], want[domain][name], tol, what)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("method", ESTIMATORS)
def test_padded_and_packed_equal_cac_eval(method, seed):
    batch = cacref.random_batch(method, seed, max_len=12, num_seqs=None)
    want = cac_eval(STDLIB / f"{method}.cac", batch)
    est = load(method, batch.get("params", {}))
    out = est(**padded_call(est, batch))
    compare(est, out, want, batch, 1e-9)
    out = est(**packed_call(est, batch))
    compare(est, out, want, batch, 1e-9, padded=False)


@pytest.mark.parametrize("method", ESTIMATORS)
def test_float32(method):
    batch = cacref.random_batch(method, 4, max_len=12)
    want = cac_eval(STDLIB / f"{method}.cac", batch)
    est = load(method, batch.get("params", {}))
    out = est(**padded_call(est, batch, torch.float32))
    for name in est.outputs:
        assert out[name].dtype == torch.float32
    compare(est, out, want, batch, 2e-4)


@pytest.mark.parametrize("method", ESTIMATORS)
def test_observation_tokens(method):
    """mask 0 inside a row is an observation token, as "obs" in cac eval."""
    batch = cacref.random_batch(method, 5, max_len=10)
    full, _, _ = with_observations(batch, random.Random(f"obs:{method}"))
    want = cac_eval(STDLIB / f"{method}.cac", full)
    est = load(method, batch.get("params", {}))
    out = est(**padded_call(est, full))
    compare(est, out, want, full, 1e-9)


def test_threads_do_not_change_results():
    batch = cacref.random_batch("gae", 6, max_len=64, num_seqs=40)
    est = load("gae", batch.get("params", {}))
    kw = padded_call(est, batch)
    one = est(threads=1, **kw)
    two = est(threads=2, **kw)
    assert torch.equal(one["adv"], two["adv"])


def test_interface():
    est = cac.load(STDLIB / "gae.cac", params={"gamma": 0.9})
    assert est.inputs == {"value": "token", "reward": "seq"}
    assert est.outputs == {"adv": "token", "ret": "token"}
    assert est.params == {"gamma": 0.9, "lambda": 0.95}
    grpo = cac.load(STDLIB / "grpo.cac")
    assert grpo.inputs == {"reward": "seq", "group": "seq"}
    tree = cac.load(STDLIB / "spo_tree.cac")
    assert tree.inputs["tree_parent"] == "node"
    assert tree.outputs["value"] == "node"


def test_string_group_ids():
    """verl's uids: any hashable ids group the sequences."""
    grpo = cac.load(STDLIB / "grpo.cac")
    R = torch.tensor([1.0, 0.0, 0.5, 2.0, 1.0])
    lengths = torch.tensor([1, 2, 1, 3, 1])
    by_str = grpo(reward=R, group=["u1", "u2", "u1", "u2", "u1"], lengths=lengths)
    by_int = grpo(reward=R, group=torch.tensor([7, 3, 7, 3, 7]), lengths=lengths)
    assert torch.equal(by_str["adv"], by_int["adv"])


@pytest.mark.parametrize("method", ESTIMATORS)
def test_packed_float32_calls_run_in_one_step(method):
    """A packed call on float32 CPU tensors runs through _cac.run_packed
    (methods without segments or trees: the others answer None) and equals
    the padded call, whose checks and packing are Python's."""
    batch = cacref.random_batch(method, 4, max_len=12)
    est = load(method, batch.get("params", {}))
    kw = packed_call(est, batch, torch.float32)
    one_step = _cac.run_packed(est._bundle(torch.float32), kw, est.params, 0)
    simple = "seg" not in est.inputs.values() and "tree_parent" not in est.inputs
    assert (one_step is not None) == simple
    out = est(**kw)
    padded = padded_call(est, batch, torch.float32)
    by_mask = est(**padded)
    for name, domain in est.outputs.items():
        want = by_mask[name][padded["mask"]] if domain in ("token", "seg") else by_mask[name]
        assert torch.equal(out[name], want), name
        if one_step is not None:
            assert torch.equal(one_step[name], want), name
    if one_step is not None:
        assert list(one_step) == list(out)


def test_calls_outside_the_one_step_case_take_the_python_path():
    """run_packed answers None, and the call's checks run in Python, for
    any call but packed CPU tensors in float32 (or integer flags) with
    integer lengths and group ids and every input of its shape."""
    grpo = cac.load(STDLIB / "grpo.cac")
    bundle = grpo._bundle(torch.float32)
    R = torch.tensor([1.0, 0.0, 0.5, 2.0])
    base = dict(reward=R, lengths=torch.tensor([1, 2, 1, 3]),
                group=torch.tensor([7, 3, 7, 3]))
    assert torch.equal(_cac.run_packed(bundle, base, grpo.params, 0)["adv"],
                       grpo(**base, out={})["adv"])
    flags = dict(base, reward=torch.tensor([1, 0, 0, 2]))
    assert torch.equal(_cac.run_packed(bundle, flags, grpo.params, 0)["adv"],
                       grpo(**dict(base, reward=flags["reward"].float()))["adv"])
    for change in [dict(reward=R.double()), dict(reward=R.half()),
                   dict(reward=R[:3]), dict(reward=R.tolist()),
                   dict(lengths=[1, 2, 1, 3]), dict(lengths=R),
                   dict(lengths=torch.tensor([1, 0, 1, 3])),
                   dict(group=["a", "b", "a", "b"]), dict(group=R),
                   dict(group=torch.tensor([7, 3, 7])), dict(rewards=R),
                   dict(offsets=torch.tensor([0, 1, 3, 4, 7])),
                   dict(seg_count=torch.tensor([1, 1, 1, 1]))]:
        assert _cac.run_packed(bundle, dict(base, **change), grpo.params, 0) is None, change
    for name in ("reward", "lengths", "group"):
        call = {k: v for k, v in base.items() if k != name}
        assert _cac.run_packed(bundle, call, grpo.params, 0) is None, name
    # Groups are structure: a method that reads none ignores them.
    gae = cac.load(STDLIB / "gae.cac")
    call = dict(value=torch.ones(7), reward=R, lengths=base["lengths"],
                group=["a", "b", "a", "b"])
    assert _cac.run_packed(gae._bundle(torch.float32), call, gae.params, 0) is not None


def test_bundles_are_cached_by_content(tmp_path):
    src = tmp_path / "a.cac"
    src.write_text((STDLIB / "rloo.cac").read_text())
    first = cac.compile_bundle(src, cache_dir=tmp_path / "cache")
    assert cac.compile_bundle(src, cache_dir=tmp_path / "cache") == first
    src.write_text(src.read_text() + "\n# changed\n")
    assert cac.compile_bundle(src, cache_dir=tmp_path / "cache") != first
    assert cac.compile_bundle(src, "f64", cache_dir=tmp_path / "cache") != first


def test_a_machine_of_another_cpu_compiles_its_own_bundle(tmp_path, monkeypatch):
    """host.so is compiled for this machine's CPU, so a cache folder that
    machines of other CPUs share keeps a bundle for each."""
    from cac import _compile
    first = cac.compile_bundle(STDLIB / "rloo.cac", cache_dir=tmp_path)
    assert cac.compile_bundle(STDLIB / "rloo.cac", cache_dir=tmp_path) == first
    monkeypatch.setattr(_compile, "_host_cpu", lambda: "flags : sse2")
    other = cac.compile_bundle(STDLIB / "rloo.cac", cache_dir=tmp_path)
    assert other != first


def test_a_bundle_folder_runs_without_the_compiler(tmp_path, monkeypatch):
    """What a machine without MLIR does: load `cac compile --bundle DIR`."""
    folder = cac.compile_bundle(STDLIB / "gae.cac", "f64", cache_dir=tmp_path)
    batch = cacref.random_batch("gae", 7, max_len=9)
    batch["params"] = {"lambda": 0.9}
    want = cac_eval(STDLIB / "gae.cac", batch)
    monkeypatch.setenv("CAC_COMPILER", str(tmp_path / "no-compiler-here"))
    est = cac.load(folder, params={"lambda": 0.9})
    compare(est, est(**padded_call(est, batch)), want, batch, 1e-9)
    with pytest.raises(TypeError, match="is f64"):
        est(**padded_call(est, batch, torch.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bool,
                                   torch.int64, torch.uint8, torch.bfloat16])
def test_right_padded_masks_pack_by_rows(dtype):
    """A right-padded CPU mask packs and unpacks by copying row prefixes
    (_cac.pack_rows); a mask with a hole inside a row takes the indexed
    path; both give what boolean indexing gives."""
    from cac import _cac
    g = torch.Generator().manual_seed(5)
    lengths = torch.randint(1, 40, (33,), generator=g)
    mask = (torch.arange(40)[None, :] < lengths[:, None]).to(dtype)
    counts, right_padded = _cac.mask_rows(mask)
    assert right_padded and torch.equal(counts, lengths)
    x = torch.randn(33, 40, generator=g, dtype=torch.float64)
    packed = _cac.pack_rows(x, counts)
    assert torch.equal(packed, x[mask != 0])
    back = _cac.unpack_rows(packed, counts, 40)
    assert torch.equal(back, x * (mask != 0))
    holed = mask.clone()
    holed[3, 0] = 0
    counts, right_padded = _cac.mask_rows(holed)
    assert not right_padded and int(counts[3]) == int(lengths[3]) - 1

    gae = load("gae", {"lambda": 0.9})
    reward = torch.randn(33, generator=g, dtype=torch.float64)
    for m in (mask, holed):
        got = gae(value=x, reward=reward, mask=m)["adv"]
        keep = m != 0
        want = gae(value=x[keep], reward=reward, lengths=keep.sum(1))["adv"]
        assert torch.equal(got[keep], want) and (got[~keep] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_full_masks_pack_and_unpack_by_views(dtype):
    """A mask without a 0 has the packed order already: token inputs reach
    the kernels and outputs come back as views, no copy, and the call
    equals the packed one (into out= tensors too)."""
    from cac import _batch
    g = torch.Generator().manual_seed(8)
    x = torch.randn(5, 7, generator=g, dtype=dtype)
    reward = torch.randn(5, generator=g, dtype=dtype)
    for mask in (torch.ones(5, 7, dtype=torch.bool), torch.ones(5, 7, dtype=torch.int64)):
        layout = _batch.make_layout({"mask": mask})
        assert layout.full and layout.pack(x).data_ptr() == x.data_ptr()
        packed = x.reshape(-1).clone()
        assert layout.to_caller(packed).data_ptr() == packed.data_ptr()
        gae = load("gae", {"lambda": 0.9})
        got = gae(value=x, reward=reward, mask=mask)
        want = gae(value=x.reshape(-1), reward=reward, lengths=torch.full((5,), 7))
        kept = {k: torch.empty(5, 7, dtype=dtype) for k in got}
        into = gae(value=x, reward=reward, mask=mask, out=kept)
        for k in got:
            assert torch.equal(got[k], want[k].view(5, 7)), k
            assert into[k] is kept[k] and torch.equal(kept[k], got[k]), k
    assert not _batch.make_layout({"mask": torch.ones(5, 7).tril()}).full


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.float32])
def test_sliced_masks_and_inputs_are_read_with_their_row_stride(dtype):
    """verl's response mask is a slice of the attention mask, its rows not
    back to back: mask_rows and pack_rows read such tensors with their row
    stride (an expanded mask with stride 0 too) and give what their
    contiguous copies give."""
    g = torch.Generator().manual_seed(9)
    lengths = torch.randint(1, 30, (17,), generator=g)
    prompt = torch.ones(17, 11, dtype=dtype)
    wide = torch.cat([prompt, (torch.arange(30)[None, :] < lengths[:, None]).to(dtype)], 1)
    mask = wide[:, -30:]
    assert not mask.is_contiguous()
    counts, right_padded = _cac.mask_rows(mask)
    assert right_padded and torch.equal(counts, lengths)
    x = torch.randn(17, 45, generator=g, dtype=torch.float64)[:, 5:35]
    assert torch.equal(_cac.pack_rows(x, counts), x.contiguous()[mask != 0])
    column = x[:, :1]
    assert torch.equal(_cac.pack_rows(column, torch.ones(17, dtype=torch.long)),
                       column.reshape(-1))
    same = (torch.arange(30) < 12).to(dtype)[None, :].expand(17, 30)
    assert torch.equal(_cac.mask_rows(same)[0], torch.full((17,), 12))

    gae = load("gae", {"lambda": 0.9})
    reward = torch.randn(17, generator=g, dtype=torch.float64)
    got = gae(value=x, reward=reward, mask=mask)
    want = gae(value=x.contiguous(), reward=reward, mask=mask.contiguous())
    for name in got:
        assert torch.equal(got[name], want[name]), name


def test_mask_rows_over_dtypes_and_block_edges():
    """_cac.mask_rows's one-pass scan (byte lanes for 1-byte masks, 255
    entries a block) against boolean arithmetic: rows of every length
    around the block edges, holes and leading zeros, every mask dtype."""
    from cac import _cac
    rng = random.Random(7)
    dtypes = [torch.bool, torch.uint8, torch.int8, torch.int32, torch.int64,
              torch.float32, torch.float64, torch.float16, torch.bfloat16]
    for T in (1, 2, 254, 255, 256, 257, 511, 512, 700):
        for trial in range(6):
            lengths = [rng.randint(0, T) for _ in range(5)]
            m = torch.zeros(5, T)
            for b, n in enumerate(lengths):
                m[b, :n] = 1
            if trial % 2:
                m[rng.randrange(5), rng.randrange(T)] = 1 - m[0, 0]
            if trial == 4 and T > 300:
                m[1] = 0
                m[1, 255] = 1  # a zero then a one across the block edge
                m[2, :256] = 1
                m[2, 300] = 1
            nz = m != 0
            want_counts = nz.sum(1)
            want_padded = all(bool(nz[b, :int(want_counts[b])].all()) for b in range(5))
            for dtype in dtypes:
                counts, right_padded = _cac.mask_rows(m.to(dtype))
                assert torch.equal(counts, want_counts), (T, trial, dtype)
                assert right_padded == want_padded, (T, trial, dtype)


def _out_like(result):
    return {k: torch.full_like(v, float("nan")) for k, v in result.items()}


@pytest.mark.parametrize("holes", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_out_tensors_equal_the_call_without_them(holes, dtype):
    """out= writes the outputs into the caller's tensors (filled with NaN
    first: every element is written, padding included) and returns them;
    the values equal the call without out=, padded (right-padded rows and
    rows with observation tokens) and packed, reused across calls with other
    shapes; outputs not in out= come back new."""
    gae = load("gae", {"lambda": 0.9})
    g = torch.Generator().manual_seed(11)
    outs = {}
    for B, T in ((7, 9), (4, 30), (7, 9)):
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        mask = torch.arange(T)[None, :] < lengths[:, None]
        if holes:
            mask[:, 0] = True
            mask[0, 0] = lengths[0] < 2  # a hole unless the row is one token
        value = torch.randn(B, T, generator=g, dtype=dtype)
        reward = torch.randn(B, generator=g, dtype=dtype)
        want = gae(value=value, reward=reward, mask=mask)
        if (B, T) not in outs:
            outs[(B, T)] = _out_like(want)
        out = outs[(B, T)]
        for t in out.values():
            t.fill_(float("nan"))
        got = gae(value=value, reward=reward, mask=mask, out=out)
        for k in want:
            assert got[k] is out[k] or got[k].data_ptr() == out[k].data_ptr()
            assert torch.equal(got[k], want[k]), k
        only = {"adv": torch.empty_like(want["adv"])}
        got = gae(value=value, reward=reward, mask=mask, out=only)
        assert got["adv"].data_ptr() == only["adv"].data_ptr()
        assert torch.equal(got["ret"], want["ret"])
        keep = mask
        packed_want = gae(value=value[keep], reward=reward, lengths=keep.sum(1))
        packed_out = _out_like(packed_want)
        got = gae(value=value[keep], reward=reward, lengths=keep.sum(1), out=packed_out)
        for k in want:
            assert got[k].data_ptr() == packed_out[k].data_ptr()
            assert torch.equal(got[k], packed_want[k])


def test_out_tensors_of_seq_outputs():
    gspo = cac.load(STDLIB / "gspo.cac")
    g = torch.Generator().manual_seed(4)
    mask = torch.arange(6)[None, :] < torch.tensor([3, 6, 2, 5])[:, None]
    kw = dict(logp_new=torch.randn(4, 6, generator=g), logp=torch.randn(4, 6, generator=g),
              reward=torch.tensor([1.0, 0.0, 1.0, 0.5]), group=torch.tensor([0, 0, 1, 1]),
              mask=mask)
    want = gspo(**kw)
    out = _out_like({k: want[k] for k in ("adv", "ratio")})
    got = gspo(**kw, out=out)
    for k in want:
        assert torch.equal(got[k], want[k]), k
    assert got["adv"].data_ptr() == out["adv"].data_ptr()
