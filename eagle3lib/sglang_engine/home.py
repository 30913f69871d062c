"""SGLang's home: how the library reads its launch commands, decode logs, metrics and a draft's aux ids, and how
its launch decides the serving causes (`HOME`, found by `serving.homes` from the name in
`engines.versions.SERVING_ENGINES`)."""
from __future__ import annotations

from ..engine_kit.home import EngineHome
from .launch import FLAGS, ROLES, SPEC_FIELDS, entrypoint, launch_fields
from .ids import UNDECIDED, id_source, sglang_reading, sglang_readings
from .loads import loaded_key, table_view
from .said import said
from . import feed_rules, launch_rules
from .introspect import installed_resolution
from .launch_lint import launch_warnings
from .resolver import accept_metrics, resolve, setting
from .rewrites import rewrite_finding
from .startup import read_sglang_startup_log
from .run_log import METRICS_MARK, METRICS_NAMED, RUN_LOG_MARK, bench_record, metrics_record, parse_sglang_log

HOME = EngineHome("sglang", FLAGS, entrypoint, launch_fields, parse_sglang_log, RUN_LOG_MARK,
                  commands="python -m sglang.launch_server ..., sglang serve ...", metrics=metrics_record,
                  metrics_mark=METRICS_MARK, metrics_named=METRICS_NAMED,
                  bench_record=bench_record,
                  speculative_fields=SPEC_FIELDS, id_readings=sglang_readings, id_reading=sglang_reading,
                  id_undecided=UNDECIDED, id_source=id_source, roles=ROLES, said=said,
                  launch_rules=launch_rules.RULES, feed_rules=feed_rules.RULES, method_rule=launch_rules.method_rule,
                  speculating=launch_rules.speculating, setting=setting, resolve=resolve, rewrite_rule=rewrite_finding,
                  introspect=installed_resolution, evidence=launch_rules.evidence, launch_warnings=launch_warnings,
                  table_view=table_view, loaded_key=loaded_key, startup_log=read_sglang_startup_log,
                  accept_metrics=accept_metrics(),
                  served_tau="an SGLang decode log, /server_info or served traffic")
