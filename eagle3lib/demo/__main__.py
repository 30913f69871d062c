"""``python -m eagle3lib.demo [--world llama|mla] [--force] [--root DIR]``: build the demo world (if needed) and print
its timing table."""
from __future__ import annotations

import argparse
import json

from .world import ensure_world


def main(argv: list[str] | None = None) -> int:
    """Build or reuse the demo world, then print stage timings, the draft's accuracy and the target's samples."""
    ap = argparse.ArgumentParser(prog="python -m eagle3lib.demo", description=__doc__)
    ap.add_argument("--world", default=None, choices=["llama", "mla"],
                    help="which demo world (default $EAGLE3LIB_DEMO_WORLD or llama): mla = DeepSeek-V3 target, "
                         "MLA draft")
    ap.add_argument("--force", action="store_true", help="rebuild even when an up-to-date world exists")
    ap.add_argument("--root", default=None, help="where to build (default data/demo or $EAGLE3LIB_DEMO_DIR)")
    ap.add_argument("--from-scratch", action="store_true",
                    help="train target and draft instead of restoring the shipped ones in data/demo_artifacts")
    ap.add_argument("--export", action="store_true",
                    help="after building, copy the trained target and draft to data/demo_artifacts(_mla)")
    args = ap.parse_args(argv)
    p = ensure_world(args.root, force=args.force, progress=True, from_scratch=args.from_scratch, world=args.world)
    if args.export:
        from .build import export_artifacts
        print(f"exported the trained target and draft to {export_artifacts(p.root)}")
    world = json.loads(p.world_json.read_text())
    print(f"\n{world.get('kind', 'llama')} demo world at {p.root} (builder {world['builder_version']}, "
          f"seed {world['seed']}, "
          f"{world['environment']['threads']} torch threads)")
    print(f"{'stage':<24}{'wall s':>9}{'CPU s':>9}")
    for row in world["timings"]:
        print(f"{row['stage']:<24}{row['wall_s']:>9.1f}{row['cpu_s']:>9.1f}")
    print(f"{'total':<24}{world['build_seconds']:>9.1f}")
    if "restored" in world:
        print(f"restored from {world['restored']['from']} in {world['restored']['seconds']} s:")
        for row in world["restored"]["timings"]:
            print(f"  {row['stage']:<22}{row['wall_s']:>9.1f}{row['cpu_s']:>9.1f}")
    t, d, v = world["target"], world["draft"], world["vocab"]
    print(f"\ntarget: {t['params']:,} params, train loss {t['final_loss']}, held-out loss {t['heldout_loss']}, "
          f"shifted loss {t['shifted_loss']}")
    print(f"draft vocab: {v['draft_vocab_size']} of {v['vocab_size']}; coverage of assistant tokens "
          f"{v['coverage_train']:.1%} in-domain, {v['coverage_shifted']:.1%} shifted")
    print(f"draft step accuracies (TTT 0..{len(d['val_acc']) - 1}): held-out {d['val_acc']}, "
          f"train {d['train_acc']}, shifted {d['shifted_acc']}")
    print(f"recorded val_acc_step0 = {d['recorded_val_acc_step0']}")
    for q, a in t["samples"].items():
        print(f"  Q: {q}\n  A: {a}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
