"""`python -m eagle3lib.diagnose ...`: the ranked causes of one deployment in a terminal; see eagle3lib.diagnose.cli."""
from .cli import main

raise SystemExit(main())
