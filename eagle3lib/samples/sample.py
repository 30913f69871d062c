"""`Sample`, one training sample as every reader returns it, and the per-sample checks behind it.

A sample is validated once when read (lengths, widths, layout, finiteness, loss mask); a failure raises DataError
naming the sample and its file/line, which the Dataset turns into a skip or an error (see eagle3lib.samples.readers).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import DataError


@dataclass(frozen=True, eq=False)  # eq=False: tensors have no truth value; samples compare by identity
class Sample:
    """One training sample: tokens, loss mask, aux slots [T, k, Ht] and (when stored) the target's final state."""
    id: str
    input_ids: Tensor                     # [T] int64
    loss_mask: Tensor                     # [T] int64, 1 = supervised position
    aux: Tensor                           # [T, k, Ht], slots in layout order
    layout: tuple[str, ...] | None = None  # eagle3lib.layout boundary names of the k slots, when known
    final_hidden: Tensor | None = None    # [T, Ht] target's final hidden state
    source: str = ""                      # file (and ":line" for jsonl)
    final_boundary: str | None = None     # "final_postnorm" (SpecForge/ModelOpt/seed) or "final_prenorm" (speculators)

    def __post_init__(self):
        if self.final_hidden is not None and self.final_boundary is None:
            object.__setattr__(self, "final_boundary", "final_postnorm")

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_slots(self) -> int:
        return int(self.aux.shape[1])

    @property
    def hidden_size(self) -> int:
        return int(self.aux.shape[2])

    def aux_concat(self) -> Tensor:
        """Aux slots concatenated in layout order, as the draft's fc takes them: [T, k*Ht]."""
        T, k, H = self.aux.shape
        return self.aux.reshape(T, k * H)  # (T, k, Ht) -> (T, k*Ht)


@dataclass(frozen=True)
class SampleOptions:
    layout: tuple[str, ...] | None      # declared by the caller
    info_layout: tuple[str, ...] | None  # from dataset_info.json
    hidden_size: int | None             # declared or dataset_info target_hidden_size
    num_layers: int | None
    max_len: int | None


def require_fields(d: dict, keys, where: str):
    missing = [k for k in keys if k not in d]
    if missing:
        raise DataError(where, f"missing key(s) {missing}", expected=list(keys), found=sorted(map(str, d)),
                        cause="a file from another tool or schema")


def squeeze_batch(t, where: str, key: str, dims: int) -> Tensor:
    """Accept [T, ...] or SpecForge's [1, T, ...]; return a tensor with `dims` dims."""
    if not isinstance(t, Tensor):
        raise DataError(where, f"'{key}' is not a tensor", found=type(t).__name__)
    if t.dim() == dims + 1 and t.shape[0] == 1:
        t = t[0]  # (1, T, ...) -> (T, ...)
    if t.dim() != dims:
        raise DataError(where, f"'{key}' has the wrong number of dims", expected=dims, found=list(t.shape))
    return t


def as_ids(x, where: str, key: str) -> Tensor:
    if isinstance(x, list):
        if not all(isinstance(v, int) for v in x):
            raise DataError(where, f"'{key}' holds non-integers", expected="a list of ints", found=x[:8])
        big = next((v for v in x if not -2**63 <= v < 2**63), None)
        if big is not None:
            raise DataError(where, f"'{key}' holds an integer too large for int64", expected="token ids < 2**63",
                            found=big, cause="a corrupt or hand-edited index")
        return torch.tensor(x, dtype=torch.long)
    t = squeeze_batch(x, where, key, 1)
    if t.dtype.is_floating_point or t.is_complex():
        raise DataError(where, f"'{key}' has a non-integer dtype", expected="int64", found=t.dtype)
    return t.long()


def split_concat(flat: Tensor, ht: int | None, k_declared: int | None, where: str) -> Tensor:
    """[T, k*Ht] concatenated slots -> [T, k, Ht]."""
    T, W = flat.shape
    if ht is None:
        if not k_declared or W % k_declared:
            raise DataError(where, "cannot tell the hidden size of the aux slots", expected="a final hidden "
                            "state, a declared hidden_size, or a layout whose length divides the width",
                            found=f"aux width {W}")
        ht = W // k_declared
    if W % ht:
        raise DataError(where, "aux width is not a multiple of the hidden size", expected=f"k * {ht}",
                        found=W, cause="hidden states of another target, or a wrong declared hidden size")
    return flat.reshape(T, W // ht, ht)  # (T, k*Ht) -> (T, k, Ht)


def build_sample(sid: str, source: str, input_ids: Tensor, loss_mask: Tensor, aux: Tensor, final: Tensor | None,
           layout: tuple[str, ...] | None, opts: SampleOptions, seq_len=None, final_boundary: str | None = None) -> Sample:
    """Validate one sample (lengths, widths, layout, finiteness, loss mask) and truncate to max_len."""
    where = f"sample '{sid}' ({source})"
    T = int(input_ids.shape[0])
    if seq_len is not None and seq_len != T:
        raise DataError(where, "seq_len disagrees with input_ids", expected=f"seq_len == len(input_ids) == {T}",
                        found=repr(seq_len), cause="the index was written for other (e.g. truncated) token ids"
                        if isinstance(seq_len, int) else "seq_len is not an integer")
    if loss_mask.shape[0] != T:
        raise DataError(where, "loss_mask length disagrees with input_ids", expected=T, found=loss_mask.shape[0])
    if aux.shape[0] != T:
        raise DataError(where, "aux hidden states have the wrong number of tokens", expected=T,
                        found=aux.shape[0], cause="hidden states captured for other token ids")
    k, ht = aux.shape[1], aux.shape[2]
    if opts.hidden_size is not None and ht != opts.hidden_size:
        raise DataError(where, "aux slots have the wrong hidden size", expected=opts.hidden_size, found=ht,
                        cause="hidden states of another target")
    if layout is not None and len(layout) != k:
        raise DataError(where, "aux slot count disagrees with the layout", expected=f"{len(layout)} slots "
                        f"{list(layout)}", found=f"{k} slots of width {ht}",
                        cause="a layout declared for another capture, or a wrong hidden size")
    if final is not None and tuple(final.shape) != (T, ht):
        raise DataError(where, "final hidden state has the wrong shape", expected=[T, ht], found=list(final.shape))
    for name, t in (("aux hidden states", aux), ("final hidden state", final)):
        # fast path: a NaN/inf makes the fp32 sum non-finite (isfinite on bf16 is ~40x slower on CPU)
        if t is None or not t.dtype.is_floating_point or bool(torch.isfinite(t.sum(dtype=torch.float32))):
            continue
        bad = int((~torch.isfinite(t)).sum())  # exact count; 0 when the sum merely overflowed
        if bad:
            raise DataError(where, f"NaN/inf in the {name}", expected="finite values", found=f"{bad} non-finite",
                            cause="overflow in the target's capture (fp16?) or a corrupt file")
    if opts.max_len is not None and T > opts.max_len:  # SpecForge truncates long samples
        m = opts.max_len
        input_ids, loss_mask, aux = input_ids[:m], loss_mask[:m], aux[:m]
        final = None if final is None else final[:m]
    loss_mask = loss_mask.long()
    if not bool(loss_mask.any()):
        raise DataError(where, "loss mask is all zero", expected="at least one supervised position",
                        found=f"{loss_mask.shape[0]} positions, none with mask 1",
                        cause="no assistant turn (chat template mismatch) or truncated before the answer")
    return Sample(sid, input_ids, loss_mask, aux, layout, final, source, final_boundary)
