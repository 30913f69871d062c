"""Test-only: the widget views an executed notebook holds, to count against the static copies a report shows."""
from __future__ import annotations

from eagle3lib.report.static_widgets import VIEW_MIME


def view_ids(nb) -> list[str]:
    """The model ids of every widget view output, in cell order."""
    return [out["data"][VIEW_MIME].get("model_id", "") for cell in nb.cells for out in cell.get("outputs", [])
            if VIEW_MIME in out.get("data", {})]
