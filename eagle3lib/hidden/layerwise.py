"""Many sequences through a streamed target, each layer read once for all of them: `capture_layerwise`.

`capture(model, ids)` on a streamed target reads every layer up to the deepest boundary for each batch. For a
training set that is one full read of the target per batch; here the loop is turned around: the sequences are cut
into right-padded batches, every batch is embedded (embedding read once) and the arguments each decoder layer gets
(masks, RoPE cos / sin, position ids) are recorded by running the model's own forward over stand-ins for its layers;
then layer by layer: read layer i, run every batch through it, keep the boundaries asked for, drop it. The weights are
read once per call, whatever the number of batches; the activations of every batch are held on the host between
layers (B x T x H per batch, plus the kept boundaries). Results equal `capture` / `capture_batch` on the same model.
Usage: ``caps = capture_layerwise(stream_target(t), [ids0, ids1, ...], only=layout, batch_size=8)``.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .capture import Capture, capture_batch, requested_boundaries
from .decoders import decoder_stack
from .stream import streamed
from ..errors import LayoutError
from ..layout import input_index
from ..progress import bar


class _Stop(Exception):
    """Raised by the last stand-in once the arguments of every layer needed are recorded."""


class _StandIn(nn.Module):
    """Takes a decoder layer's place for one forward: records (hidden_states, kwargs), returns the input."""

    def __init__(self, layer: nn.Module, i: int, log: dict, last: int):
        super().__init__()
        self.__dict__["_layer"] = layer          # not a submodule: its hooks and weights stay untouched
        self.i, self.log, self.last = i, log, last

    def __getattr__(self, name):                 # attention_type, layer_idx ... as the real layer has them
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_layer"], name)

    def forward(self, hidden_states, *args, **kwargs):
        self.log[self.i] = (args, kwargs)
        if self.i == 0:
            self.log["embed"] = hidden_states
        if self.i >= self.last:
            raise _Stop
        return hidden_states


def _to(x, device):
    """Every tensor in a (nested) tuple / list / dict moved to `device`; other values as they are."""
    if isinstance(x, Tensor):
        return x.to(device)
    if isinstance(x, (tuple, list)):
        return type(x)(_to(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to(v, device) for k, v in x.items()}
    return x


def _batches(seqs: list[Tensor], batch_size: int, pad_id: int):
    out = []
    for start in range(0, len(seqs), batch_size):
        chunk = seqs[start:start + batch_size]
        T = max(len(s) for s in chunk)
        ids = torch.full((len(chunk), T), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), T), dtype=torch.long)
        for b, s in enumerate(chunk):
            ids[b, :len(s)], mask[b, :len(s)] = s, 1           # right padding
        out.append((ids, mask, [len(s) for s in chunk]))
    return out


def _record(base, layers, ids: Tensor, mask: Tensor, deepest: int, device) -> tuple[Tensor, list]:
    """(embedding output (B, T, H), [(args, kwargs) of layer i for i < deepest]) of one batch, on the host."""
    log: dict = {}
    real = base.layers
    base.layers = nn.ModuleList([_StandIn(layer, i, log, max(deepest - 1, 0)) for i, layer in enumerate(layers)])
    try:
        base(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False)
    except _Stop:
        pass
    finally:
        base.layers = real
    if "embed" not in log:
        raise LayoutError(f"layerwise capture of {type(base).__name__}", "its forward did not call its decoder layers",
                          expected="hidden_states = layer(hidden_states, ...) for each layer", found="no call",
                          cause="an architecture whose decoder loop differs; use capture() on a loaded model")
    host = torch.device("cpu")
    return log["embed"].to(host), [_to(log[i], host) if device.type != "cpu" else log[i] for i in range(deepest)]


def capture_layerwise(model, sequences, *, only=None, batch_size: int = 8, pad_id: int = 0,
                      progress: bool = False) -> list[Capture]:
    """One Capture per sequence (boundaries `only`, or all), each layer of a streamed `model` read once for all
    sequences (module docstring). A loaded model falls back to `capture_batch`."""
    stream = streamed(model)
    seqs = [torch.as_tensor(s, dtype=torch.long).reshape(-1) for s in sequences]
    if stream is None:
        return capture_batch(model, seqs, only=only, batch_size=batch_size, pad_id=pad_id)
    if not seqs:
        return []
    base, layers, norm = decoder_stack(model)
    L, dev = len(layers), stream.device
    wanted = requested_boundaries(only, L)
    deepest = max(input_index(n, L) for n in wanted)
    batches = _batches(seqs, batch_size, pad_id)
    kept: list[dict[str, Tensor]] = [{} for _ in batches]
    meter = bar(total=deepest + 1, desc="recapture", progress=progress, unit="layer")
    try:
        with torch.inference_mode():
            with stream.pinned(base.get_input_embeddings()):
                recorded = [_record(base, layers, ids, mask, deepest, dev) for ids, mask, _ in batches]
            hidden = [h for h, _ in recorded]
            meter.update(1)
            for i in range(deepest):
                name = "embed" if i == 0 else f"layer_in.{i}"
                for b, h in enumerate(hidden):
                    if name in wanted:
                        kept[b][name] = h              # layers return new tensors: h is never written again
                with stream.pinned(layers[i]):
                    for b, (h, (_, calls)) in enumerate(zip(hidden, recorded)):
                        args, kwargs = calls[i] if dev.type == "cpu" else _to(calls[i], dev)
                        hidden[b] = layers[i](h.to(dev), *args, **kwargs).to("cpu")
                meter.update(1)
            last = "embed" if deepest == 0 else f"layer_in.{deepest}" if deepest < L else "final_prenorm"
            for b, h in enumerate(hidden):
                if last in wanted:
                    kept[b][last] = h
            if "final_postnorm" in wanted:
                with stream.pinned(norm):
                    for b, h in enumerate(hidden):
                        kept[b]["final_postnorm"] = norm(h.to(dev)).to("cpu")
    finally:
        stream.release()
        meter.update(meter.total - meter.n)
        meter.close()
    out = []
    for (ids, _, lens), states in zip(batches, kept):
        for b, n in enumerate(lens):    # right padding: the first n positions are the sequence's tokens
            # views, not copies: a group's states are held once (the sequences of a batch share its storage)
            out.append(Capture({k: states[k][b, :n] for k in wanted}, ids[b, :n].clone(), L, stream.dtype,
                               "streamed"))
    return out
