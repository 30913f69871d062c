"""`python -m eagle3lib.report ...`: every notebook -> reports/; see eagle3lib.report.runner."""
from .runner import main

raise SystemExit(main())
