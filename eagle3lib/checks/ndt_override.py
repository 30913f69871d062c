"""12 `ndt_override`: the speculative settings an engine runs for a launch, against those it was given.

The launch's engine's home decides (`EngineHome.rewrite_rule`: SGLang's `sglang_engine.rewrites`, from the server's
report, its rule table at a version, its installed resolver or the table by version range); a home that resolves no
settings (`EngineHome.resolve` absent: vLLM) runs them as given. notebook 01's
`steps.discovery.Discovery.cause_findings` calls it with what it read.
"""
from __future__ import annotations

import pandas as pd

from ..causes import Finding, not_checked
from ..engine_kit.launch_reading import LaunchArgs
from ..engines.versions import engine_title
from ..serving.homes import homes


def ndt_override_findings(launch: LaunchArgs | None, resolution, version: str, version_source: str,
                          observed: bool, diff: pd.DataFrame, target_arch: str | None,
                          introspection=None) -> list[Finding]:
    """The serving-settings cause (`ndt_override`) for a launch, as its home's `rewrite_rule` judges what discovery
    read: its offline `resolution` at `version` (from `version_source`), the server's report (`diff`; `observed` when
    one was read), the target architecture and the installed engine's answer (`introspection`). Not checked without
    a launch, or where a speculative flag did not parse (never evidence of a rewrite)."""
    where = "serving settings (launch command vs effective settings)"
    if launch is None:
        return [not_checked("ndt_override", where, "the launch command (launch)")]
    home, title = homes().get(launch.engine), engine_title(launch.engine)
    unread = [k for k in launch.unread if k in getattr(home, "speculative_fields", ())]
    if unread:
        flags = ", ".join("--" + k.replace("_", "-") for k in unread)
        return [Finding("ndt_override", "not checked", f"not checked: {flags} could not be read",
                        {"unread": unread}, where, needs=f"the launch command with a valid value ({flags})")]
    rule = getattr(home, "rewrite_rule", None)
    if rule is not None:
        return [rule(launch, resolution, version, version_source, observed, diff, target_arch, introspection, where)]
    if home is not None and home.resolve is None:       # its startup rewrites nothing: the settings run as given
        k = launch.num_speculative_tokens
        return [Finding("ndt_override", "ruled out", f"{title} runs K as given",
                        {"engine": launch.engine, **({"num_speculative_tokens": k} if isinstance(k, int) else {})},
                        where)]
    return [Finding("ndt_override", "not checked", f"not checked: the {title} home has no rule for its startup "
                    "rewrites", {"engine": launch.engine}, where,
                    needs=f"{title}'s rewrite rule (EngineHome.rewrite_rule)")]
