"""``python -m eagle3lib.demo [--world llama|mla] [--force] [--root DIR]``: restore the demo world from the shipped
artifacts (if needed) and print what it is. Building it (training) is the builder's: ``python -m eagle3demo`` in a
source checkout."""
from __future__ import annotations

import argparse
import time

from .shipped import artifacts_dir
from .world import add_world_arguments, ensure_world, paths, world_table


def main(argv: list[str] | None = None) -> int:
    """Restore or reuse the demo world, say which, then print its stage timings, accuracies and samples."""
    ap = argparse.ArgumentParser(prog="python -m eagle3lib.demo", description=__doc__)
    add_world_arguments(ap, "restore")
    args = ap.parse_args(argv)
    before = paths(args.root, args.world).world_json.stat().st_mtime_ns if not args.force and \
        paths(args.root, args.world).world_json.is_file() else None
    t0 = time.monotonic()
    p = ensure_world(args.root, force=args.force, progress=True, world=args.world)
    same = before is not None and p.world_json.stat().st_mtime_ns == before
    print(f"{p.kind} demo world at {p.root}: " + ("up to date, reused" if same else
          f"restored from {artifacts_dir(p.kind)} in {time.monotonic() - t0:.0f} s"))
    print(world_table(p))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
