"""Engine kit: what every engine's home is built of, whatever the engine (the homes: `eagle3lib.sglang_engine`,
`eagle3lib.vllm_engine`; found by name from `engines.versions.SERVING_ENGINES` in `serving.homes`).

- `home`           `EngineHome`: what one engine's home gives the library (launch entrypoints and flags, decode-log
                   and metrics readers, what the running engine said of a draft: `said`).
- `launch_reading` `LaunchArgs`, and a command's tokens, env prefix and flags read against a home's flag table.
- `log_scan`       a decode log split into runs with its bad lines and warnings (`LogScan`, `ParseResult`); a logged
                   call's keyword arguments; a Prometheus scrape's values.
- `view`           `EngineView`: the draft as an engine loads it, aspect by aspect, each with the source that answered
                   (dump > log > probe > table); `Served`, what a deployment left for a home's `said` to read.
- `launch_evidence` `LaunchEvidence`: what a launch's own flags say of how the draft runs (CUDA graphs, quantization,
                   KV dtype, K schedule, chunking, grammars), read by its home (`EngineHome.evidence`), judged by the
                   checks.
- `table_view`     the aspects of a draft every engine's tables answer alike (layout, d2t, embedding), which each
                   home's `table_view` builds its `EngineView` from.
- `capturespec`    `CaptureSpec`: the boundaries an engine hands the draft (by its capture rules), and a hook tap that
                   gathers them from an HF target.
- `feed`           `OptOut`, `RankSpread`: what a draft's config and weights say of the states it expects, as a home's
                   `feed_rules` judge them (checks.draft_feed reads the draft once).
- `lint`           `LintWarning`: a setting or config that cannot help (a home's `launch_warnings`, crossengine.lint).
- `flag_values`    a launch flag's value as a check reads it (switch, integer, vLLM's --speculative-config), each with
                   the problem naming the flag; the finding of a garbled value.
- `id_reading`     `EngineReading` (an engine's reading of a draft's aux ids), the ids named as target boundaries.
- `records`        `RunRecord`, one measured serving run as data; JSON-lines I/O, DataFrame view.
- `process`        one server as a child process group on 127.0.0.1: start, health, HTTP, stop by the id it started.
- `prompts`        the prompts sent to a real engine: a prompts .jsonl, or a dataset's user turns (`write_prompts`).
"""
