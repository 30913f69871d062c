"""vLLM's home: how the library reads its launch commands, decode logs, metrics and a draft's aux ids, and how
its launch decides the serving causes (`HOME`, found by `serving.homes` from the name in
`engines.versions.SERVING_ENGINES`)."""
from __future__ import annotations

from ..engine_kit.home import EngineHome
from .launch import FLAGS, ROLES, SPEC_FIELDS, entrypoint, launch_fields
from .ids import UNDECIDED, id_source, vllm_reading, vllm_readings
from .loads import built_fc_slots, loaded_key, table_view
from .said import said
from . import feed_rules, launch_rules
from .method import launch_warnings, setting
from .engine_log import read_vllm_log
from .run_log import (ACCEPT_METRICS, METRICS_MARK, METRICS_NAMED, RUN_LOG_MARK, bench_record, metrics_record,
                      parse_vllm_log)

HOME = EngineHome("vllm", FLAGS, entrypoint, launch_fields, parse_vllm_log, RUN_LOG_MARK,
                  commands="vllm serve MODEL ..., python -m vllm.entrypoints.openai.api_server ...",
                  metrics=metrics_record, metrics_mark=METRICS_MARK, metrics_named=METRICS_NAMED,
                  bench_record=bench_record, speculative_fields=SPEC_FIELDS,
                  id_readings=vllm_readings,
                  id_reading=vllm_reading, id_undecided=UNDECIDED, id_source=id_source, roles=ROLES, said=said,
                  launch_rules=launch_rules.RULES, feed_rules=feed_rules.RULES, method_rule=launch_rules.method_rule,
                  speculating=launch_rules.speculating, setting=setting, startup_log=read_vllm_log,
                  evidence=launch_rules.evidence, launch_warnings=launch_warnings, table_view=table_view,
                  loaded_key=loaded_key, mla_as_parts=True, accept_metrics=ACCEPT_METRICS,
                  built_fc_slots=built_fc_slots, served_tau="a vLLM log or /metrics")
