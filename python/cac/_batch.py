"""From the caller's tensors to the runtime's packed batch and back.

Two layouts (docs/python.md): padded, with token inputs [B, T] and a mask
[B, T] (1 = action token, 0 = padding or, inside a row, an observation
token), and packed, with token inputs [N] and `lengths` [B] or `offsets`
[B+1]. The runtime's PackedBatch holds the structure; this module checks
what the caller gave, with messages that name the input and the expected
shape, before anything reaches C++.
"""

import torch

from . import _cac

#: Call arguments that describe the batch's structure rather than inputs.
STRUCTURE = ("mask", "lengths", "offsets", "group", "tree_parent",
             "tree_node", "seg_count")

_FLOATS = (torch.float32, torch.float64)
_CPU = torch.device("cpu")
_INTEGERS = frozenset((torch.int64, torch.int32, torch.int16, torch.int8,
                       torch.uint8, torch.bool))


def is_integer(t):
    """True for integer and bool tensors (the common dtypes by a set
    lookup: a call checks several such tensors)."""
    return t.dtype in _INTEGERS or not (t.is_floating_point() or t.is_complex())


def shape_of(t):
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def as_tensor(name, x):
    """`x` as a tensor: tensors pass, numpy arrays and lists of numbers are
    converted; anything else is a TypeError naming the input."""
    if isinstance(x, torch.Tensor):
        return x
    if hasattr(x, "__array__") or isinstance(x, (list, tuple)):
        try:
            return torch.as_tensor(x)
        except (TypeError, ValueError, RuntimeError):
            pass
    raise TypeError(f"input '{name}' must be a torch.Tensor, got "
                    f"{type(x).__name__}")


def check_real(name, t):
    """Inputs are float32/float64 or integer/bool flags."""
    if t.dtype in _FLOATS or not (t.is_floating_point() or t.is_complex()):
        return
    raise TypeError(f"input '{name}' has dtype {t.dtype}; expected float32 "
                    "or float64 (or integer/bool flags)")


def _check_device_kind(name, t):
    # is_cpu/is_cuda rather than device.type, which builds a string.
    if not (t.is_cpu or t.is_cuda):
        raise ValueError(f"'{name}' is on {t.device}; cac runs on CPU or CUDA "
                         "tensors")


def settle_device(layout, tensors):
    """All inputs on one device, which the run uses; the mask or lengths
    may be there too or on the CPU (the structure is built on the host)."""
    device, first = None, None
    for name, t in tensors.items():
        if device is None:
            device, first = t.device, name
        elif t.device != device:
            raise ValueError(f"input '{name}' is on {t.device} but '{first}' "
                             f"is on {device}; put every input on one device")
    if device is None:
        return
    _check_device_kind(first, tensors[first])
    if layout.device != device and layout.device.type != "cpu":
        raise ValueError(f"the inputs are on {device} but the mask/lengths on "
                         f"{layout.device}")
    layout.device = device


class Layout:
    """The structure of one call: the runtime batch, whether the caller's
    tensors are padded, and the sizes they must have. A padded layout packs
    right-padded rows on the CPU by copying each row's prefix, anything else
    by a flat index of the action tokens computed where the mask lives; a
    mask without a 0 has the packed order already, and packs and unpacks by
    views."""

    def __init__(self, batch, padded, device, mask=None, counts=None,
                 right_padded=False):
        self.batch = batch
        self.padded = padded
        self.device = device
        self.mask = mask
        self.counts = counts
        self.right_padded = right_padded
        self._index = None
        self.B = batch.num_seqs
        self.N = batch.num_tokens
        self.T = mask.shape[1] if padded else None
        self.full = padded and self.N == self.B * self.T

    @property
    def on_cpu(self):
        """Whether the run is on the CPU (a comparison: device.type builds a
        string per call)."""
        return self.device == _CPU

    def _by_rows(self, t):
        return self.right_padded and t.is_cpu

    def _flat_index(self, device):
        """The flat positions of the action tokens in [B, T], computed once
        per call where the mask lives: indexing with it packs and unpacks
        several times faster than boolean masks."""
        if self._index is None:
            self._index = self._bool_mask().reshape(-1).nonzero().squeeze(1)
        if self._index.device != device:
            src = self._index.pin_memory() if device.type == "cuda" else self._index
            self._index = src.to(device, non_blocking=True)
        return self._index

    def _bool_mask(self):
        return self.mask if self.mask.dtype == torch.bool else self.mask != 0

    def pack(self, x):
        """A padded [B, T] tensor packed to [N]."""
        if self.full:
            return x.reshape(-1)
        if self._by_rows(x):
            return _cac.pack_rows(x, self.counts)
        return x.reshape(-1).index_select(0, self._flat_index(x.device))

    def token_shape(self):
        return (self.B, self.T) if self.padded else (self.N,)

    def token_expected(self):
        if self.padded:
            return f"[B, T] = [{self.B}, {self.T}] like the mask"
        return f"[N] = [{self.N}] (packed)"

    def to_caller(self, t, into=None):
        """A packed token output in the caller's layout (0 where the mask
        is 0), written into `into` (checked by _out.check_tensors) when
        given."""
        if not self.padded:
            return t if into is None else into.copy_(t)
        if self.full:
            t = t.view(self.B, self.T)
            return t if into is None else into.copy_(t)
        if self._by_rows(t):
            return _cac.unpack_rows(t, self.counts, self.T, into)
        if into is None:
            into = t.new_zeros(self.B, self.T)
        else:
            into.zero_()
        into.view(-1).index_copy_(0, self._flat_index(t.device), t)
        return into


def _checked_batch(counts, what):
    """The runtime batch of `counts` tokens per sequence; every sequence
    needs one (the batch finds the first that has none while it builds its
    offsets: no tensor operation per call)."""
    batch = _cac.Batch.from_lengths(counts)
    b = batch.first_empty_seq
    if b >= 0:
        raise ValueError(f"{what}: sequence {b} has no action token; every "
                         "sequence needs at least one")
    return batch


def _padded_layout(mask):
    mask = as_tensor("mask", mask)
    if mask.dim() != 2:
        raise ValueError(f"mask: expected [B, T], got shape {shape_of(mask)}")
    if mask.is_complex():
        raise TypeError(f"mask has dtype {mask.dtype}; expected bool, "
                        "integer or float 0/1")
    _check_device_kind("mask", mask)
    if mask.is_cpu:
        counts, right_padded = _cac.mask_rows(mask)
    else:
        # Not checked for right-padded rows: the flat index by nonzero() on
        # the device packs faster than one built from the counts.
        counts = (mask if mask.dtype == torch.bool else mask != 0).sum(dim=1).cpu()
        right_padded = False
    # The package packs and unpacks itself (Layout.pack), so the runtime's
    # batch needs the lengths only, not a copy of the mask.
    return Layout(_checked_batch(counts, "mask"), True, mask.device, mask,
                  counts, right_padded)


def _packed_layout(lengths, offsets):
    if offsets is not None:
        offsets = as_tensor("offsets", offsets)
        if offsets.dim() != 1 or offsets.numel() < 1 or offsets.is_floating_point():
            raise ValueError("offsets: expected integer [B+1] (token b of the "
                             f"packed inputs start at offsets[b]), got shape "
                             f"{shape_of(offsets)} and dtype {offsets.dtype}")
        if int(offsets[0]) != 0:
            raise ValueError(f"offsets: offsets[0] must be 0, got {int(offsets[0])}")
        _check_device_kind("offsets", offsets)
        device = offsets.device
        lengths = (offsets[1:] - offsets[:-1]).cpu()
    else:
        lengths = as_tensor("lengths", lengths)
        if lengths.dim() != 1 or not is_integer(lengths):
            raise ValueError("lengths: expected integer [B] (tokens per "
                             f"sequence), got shape {shape_of(lengths)} and "
                             f"dtype {lengths.dtype}")
        _check_device_kind("lengths", lengths)
        device = lengths.device
        lengths = lengths.cpu()
    batch = _checked_batch(lengths, "lengths" if offsets is None else "offsets")
    return Layout(batch, False, device)


def make_layout(kw):
    """The Layout of a call from its mask= or lengths=/offsets= argument."""
    mask, lengths, offsets = (kw.pop(k, None) for k in ("mask", "lengths", "offsets"))
    if mask is not None and (lengths is not None or offsets is not None):
        raise TypeError("give mask= (padded inputs) or lengths=/offsets= "
                        "(packed inputs), not both")
    if lengths is not None and offsets is not None:
        raise TypeError("give lengths= or offsets=, not both")
    if mask is not None:
        return _padded_layout(mask)
    if lengths is not None or offsets is not None:
        return _packed_layout(lengths, offsets)
    raise TypeError("missing mask=[B, T] (padded inputs) or lengths=[B] / "
                    "offsets=[B+1] (packed inputs)")


def group_ids(group, B):
    """Integer [B] ids of `group` for Batch.set_groups: integer ids (tensor,
    array or list) as they are (set_groups reads any integer dtype on any
    device), any other hashable ids (verl's uid strings) by their rank
    among the sorted distinct ids (first appearance when they do not
    sort)."""
    if isinstance(group, torch.Tensor) or (
            hasattr(group, "dtype") and getattr(group.dtype, "kind", "O") in "iub"):
        t = group if isinstance(group, torch.Tensor) else torch.as_tensor(group)
        if not is_integer(t):
            raise TypeError(f"group has dtype {t.dtype}; expected integer "
                            "ids or hashable ids (e.g. uid strings)")
        if t.dim() != 1 or t.shape[0] != B:
            raise ValueError(f"group: expected [B] = [{B}] ids, got shape "
                             f"{shape_of(t)}")
        return t
    try:
        ids = list(group)
    except TypeError:
        raise TypeError(f"group must be a tensor or a sequence of ids, got "
                        f"{type(group).__name__}") from None
    if len(ids) != B:
        raise ValueError(f"group: expected [B] = [{B}] ids, got {len(ids)}")
    try:
        distinct = sorted(set(ids))
    except TypeError:
        distinct = list(dict.fromkeys(ids))
    rank = {v: i for i, v in enumerate(distinct)}
    return torch.tensor([rank[v] for v in ids], dtype=torch.long)


def set_tree(layout, parent, node):
    parent = as_tensor("tree_parent", parent)
    node = as_tensor("tree_node", node)
    if parent.dim() != 1 or parent.is_floating_point():
        raise ValueError("tree_parent: expected integer [K] (the parent of "
                         f"each node, -1 for a root), got shape "
                         f"{shape_of(parent)} and dtype {parent.dtype}")
    if tuple(node.shape) != layout.token_shape() or node.is_floating_point():
        raise ValueError(f"tree_node: expected integer {layout.token_expected()}"
                         f" (the node of each token), got shape "
                         f"{shape_of(node)} and dtype {node.dtype}")
    node = node.cpu().long()
    if layout.padded:
        node = layout.pack(node)
    layout.batch.set_tree(parent.cpu().long(), node)


def seg_counts(layout, seg_count, width):
    """int64 [B] segment values per sequence: `seg_count`, or `width` each
    in the padded layout."""
    B = layout.B
    if seg_count is None:
        if not layout.padded:
            raise TypeError("packed seg inputs need seg_count=[B] (values per "
                            "sequence)")
        return torch.full((B,), width, dtype=torch.long)
    c = as_tensor("seg_count", seg_count)
    if c.dim() != 1 or c.shape[0] != B or c.is_floating_point():
        raise ValueError(f"seg_count: expected integer [B] = [{B}], got shape "
                         f"{shape_of(c)} and dtype {c.dtype}")
    c = c.cpu().long()
    lengths = layout.batch.lengths
    bad = ((c < 0) | (c > lengths)).nonzero()
    if bad.numel():
        b = int(bad[0, 0])
        raise ValueError(f"seg_count[{b}] = {int(c[b])} but sequence {b} has "
                         f"{int(lengths[b])} action tokens (at most one "
                         "segment per token)")
    if layout.padded and c.numel() and int(c.max()) > width:
        raise ValueError(f"seg_count: up to {int(c.max())} values per sequence "
                         f"but the seg inputs are {width} wide")
    return c


def seg_buffer(name, x, layout, counts):
    """A seg input ([B, S] padded or [sum(counts)] packed) in the kernels'
    by-segment layout: segment j of sequence b at seq_offsets[b] + j."""
    total = int(counts.sum())
    if layout.padded:
        if x.dim() != 2 or x.shape[0] != layout.B:
            raise ValueError(f"input '{name}' (seg): expected [B, S] = "
                             f"[{layout.B}, S] with seg_count, got shape "
                             f"{shape_of(x)}")
        S = x.shape[1]
        keep = torch.arange(S)[None, :] < counts[:, None]
        values = x[keep.to(x.device)]
    else:
        if x.dim() != 1 or x.shape[0] != total:
            raise ValueError(f"input '{name}' (seg): expected [sum(seg_count)]"
                             f" = [{total}] (packed), got shape {shape_of(x)}")
        S = int(counts.max()) if counts.numel() else 0
        keep = torch.arange(S)[None, :] < counts[:, None]
        values = x
    starts = layout.batch.seq_offsets[:-1].long()
    pos = (starts[:, None] + torch.arange(S)[None, :])[keep]
    dtype = x.dtype if x.dtype in _FLOATS else torch.float32
    buf = torch.zeros(layout.N, dtype=dtype, device=x.device)
    buf[pos.to(x.device)] = values.to(dtype)
    return buf


def check_segments(layout, counts, starts, name):
    """The segment values given per sequence must be as many as the
    estimator's segments (its `_seg_start` output)."""
    cs = torch.cat([starts.new_zeros(1), (starts != 0).long().cumsum(0)]).cpu()
    off = layout.batch.seq_offsets.long().cpu()
    found = cs[off[1:]] - cs[off[:-1]]
    bad = (found != counts).nonzero()
    if bad.numel():
        b = int(bad[0, 0])
        raise ValueError(f"input '{name}' (seg): sequence {b} has "
                         f"{int(counts[b])} segment values but the estimator's"
                         f" segments split it into {int(found[b])}")
