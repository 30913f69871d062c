"""Command line for replay at dataset size, one process or many: `torchrun --nproc-per-node 8 -m eagle3lib.replay
--draft D --target T --train-data P --out result.json` (plain `python -m eagle3lib.replay ...` runs one process).

Every rank replays its shard (`distributed.replay_sharded`); rank 0 writes the merged ReplayResult as JSON (read it with
`eagle3lib.replay.distributed.load_result`) and prints its summary as one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from . import distributed
from ..errors import Eagle3Error
from ..names import add_old_flags
from .stats import D2T_MODES
from .stats import REFERENCES


def parser() -> argparse.ArgumentParser:
    """The CLI's arguments (the options of replay.replay)."""
    p = argparse.ArgumentParser(prog="python -m eagle3lib.replay", description=__doc__.split("\n\n")[0])
    p.add_argument("--draft", required=True, help="draft checkpoint directory")
    p.add_argument("--target", default=None, help="target directory (embedding, lm_head, config, tokenizer)")
    p.add_argument("--train-data", required=True, help="training data (any format open_dataset reads; required)")
    p.add_argument("--format", default=None, help="data format when auto-detection is not wanted")
    p.add_argument("--layout", default=None,
                   help="comma-separated boundaries fed to fc (default: the draft's training layout); 'zeros' fills")
    p.add_argument("--label", default=None)
    p.add_argument("--num-samples", type=int, default=None, help="replay n samples drawn by --seed (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-steps", type=int, default=3)
    p.add_argument("--fill", choices=("error", "zeros"), default="error")
    p.add_argument("--d2t", choices=D2T_MODES, default="offsets")
    p.add_argument("--align", type=int, default=0)
    p.add_argument("--mask", choices=("token", "next"), default="token")
    p.add_argument("--reference", choices=REFERENCES, default="auto")
    p.add_argument("--no-simulate", action="store_true", help="skip the chain-drafting simulation")
    p.add_argument("--batch-tokens", type=int, default=8192, help="padded tokens per forward batch")
    p.add_argument("--dtype", default="auto", help="auto (bf16 on CUDA, fp32 on CPU), float32, bfloat16, ...")
    p.add_argument("--out", required=True, help="where rank 0 writes the result JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_old_flags(p)        # --data: the old name of --train-data, for one release (a warning)
    return p


def main(argv=None) -> int:
    """Run the replay on this rank; rank 0 saves the result and prints its summary. Exit 2 on bad input."""
    a = parser().parse_args(argv)
    layout = [x.strip() for x in a.layout.split(",") if x.strip()] if a.layout else None
    t0 = time.perf_counter()
    try:
        r = distributed.replay_sharded(a.draft, a.train_data, target=a.target, dtype=a.dtype, layout=layout,
                                       label=a.label, n=a.num_samples, seed=a.seed, data_format=a.format,
                                       num_steps=a.num_steps, fill=a.fill, d2t=a.d2t, align=a.align, mask=a.mask,
                                       reference=a.reference, simulate=not a.no_simulate,
                                       batch_tokens=a.batch_tokens, progress=not a.quiet)
    except Eagle3Error as e:
        print(f"eagle3lib.replay: {e}", file=sys.stderr)
        return 2
    if r is not None:
        world = int(os.environ.get("WORLD_SIZE", 1))
        distributed.save_result(r, a.out, world_size=world, wall_s=round(time.perf_counter() - t0, 3))
        print(json.dumps(r.summary()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
