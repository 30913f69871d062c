"""Engines: what SGLang and vLLM do with a draft, by version, as data with its source, the one list of engines
(`versions.SERVING_ENGINES`) and the knowledge across them (each engine's own launch, logs, settings and driver
live in its home, `eagle3lib.<name>_engine`).

- `versions`        the serving engines (`SERVING_ENGINES`, written here only), one version parser per engine; the
                    versions the tables were read and checked against.
- `facts`           the one table of engine knowledge: which engine / version reads which config field, flag or
                    key (rows with since / until, source), and the functions every caller asks it through.
- `fact_row`        one row of it (`Fact`, `Refusal`), and the sources and served numbers several topics' rows cite.
- `facts_config`    its rows about the draft config's fields: the variant flags, RoPE, eps / activation.
- `facts_ids`       its rows about the aux layer ids: the keys each reader takes them from, the fc's slot keys,
                    the layers captured when the config names none.
- `facts_weights`   its rows about the draft's weights: checkpoint key names, embedding / lm_head sharing.
- `facts_serving`   its rows about serving around the draft: server features, the metric, the method, the
                    draft's window and context.
- `facts_target`    its rows about the target and the host: an MLA target's config, AMX / CPU_MLA routes.
- `facts_refusals`  its rows about what each refusal of a draft means: the frame / message the engine dies with,
                    the cause whose fix makes it accept, the key that asks for it, the fix.
- `advice`          which layer ids to write per engine for a trained layout; what an engine captures for ids.
- `capture_rules`   what SGLang / vLLM feed an MLA (DeepSeek-V3, Kimi-K2) target's draft and multi-layer drafts,
                    by version, with sources (data), and the resolvers over it.
- `mla_fields`      which config fields of an MLA target (and its MLA EAGLE-3 draft) transformers, SGLang and vLLM
                    read, with the source of each read (data).
- `verification`    where a speculative engine drafts: its verification walk (`verification_walk`).
- `host`            the host a run is on (AMX or not) and the route vLLM CPU takes there for an MLA model (dtype,
                    backend), read from the facts' "host" rows.
- `draft_edit`      a draft folder copied with config / tensor edits (the variants a probe or a serve checks).
- `engine_errors`   the exceptions an engine's log (tracebacks, native aborts) ends with; the engine's own root error;
                    which refusal row (facts_refusals) explains it.
"""
