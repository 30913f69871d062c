"""`python -m eagle3lib.replay ...` (or under `torchrun`): replay at dataset size; see eagle3lib.replay.cli."""
from .cli import main

raise SystemExit(main())
