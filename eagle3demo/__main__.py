"""``python -m eagle3demo [--world llama|mla] [--force] [--from-scratch] [--export] [--root DIR]
[--vllm NAME ...] [--sglang NAME ...]``: build the demo world (train its target and draft, or restore the shipped
ones), print its timing table, export it to the shipped artifacts, serve its demo deployments on the real engines."""
from __future__ import annotations

import argparse

from eagle3lib.demo.shipped import artifacts_current
from eagle3lib.demo.world import add_world_arguments, ensure_world, paths, world_table

from .build import build_world, export_artifacts


def main(argv: list[str] | None = None) -> int:
    """Build or reuse the demo world, print its stage timings, accuracies and samples; export and serve on request."""
    ap = argparse.ArgumentParser(prog="python -m eagle3demo", description=__doc__)
    add_world_arguments(ap, "build")
    ap.add_argument("--from-scratch", action="store_true",
                    help="train target and draft instead of restoring the shipped ones in data/demo_artifacts "
                         "(also when those are not the current builder version's)")
    ap.add_argument("--export", action="store_true",
                    help="after building, copy the trained target and draft to data/demo_artifacts(_mla)")
    ap.add_argument("--vllm", nargs="+", default=(), metavar="NAME",
                    help="then serve (and dump) these demo deployments on the real vLLM under data/demo_vllm(_mla) "
                         "(make vllm), reusing a current one")
    ap.add_argument("--sglang", nargs="+", default=(), metavar="NAME",
                    help="then serve (and dump) these demo deployments on the real SGLang under data/demo_sglang "
                         "(make sglang), reusing a current one")
    args = ap.parse_args(argv)
    kind = paths(args.root, args.world).kind
    scratch = args.from_scratch or not artifacts_current(kind)
    p = ensure_world(args.root, force=args.force, progress=True, world=args.world,
                     make=build_world if scratch else None)
    if args.export:
        print(f"exported the trained target and draft to {export_artifacts(p.root)}")
    print(world_table(p))
    for name in args.vllm:
        from .vllm_world import ensure as vllm_ensure
        d = vllm_ensure(name, world=kind)
        print(f"vLLM demo deployment {name}: accept length {d.accept_length} ({'ok' if d.ok else d.error}) -> {d.dir}")
    for name in args.sglang:
        from .sglang_world import ensure as sglang_ensure
        d = sglang_ensure(name)
        print(f"SGLang demo deployment {name}: accept length {d.accept_length} ({'ok' if d.ok else d.error}) "
              f"-> {d.dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
