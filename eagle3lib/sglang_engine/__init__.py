"""SGLang's home: everything the library does with SGLang in one folder, reading its commands and logs, knowing its
settings, and running the real SGLang (its own venv, reached only by subprocess). What SGLang reads of a draft, by
version, is rows of the one table `eagle3lib.engines.facts`.

- `home`        `HOME`: the launch, log and metrics readers `serving.homes` hands to the library.
- `launch`      its launch commands (``python -m sglang.launch_server``, ``sglang serve``) and flags (ServerArgs names).
- `run_log`     its decode log (every ``Decode batch`` variant, ``server_args=ServerArgs(...)``) its metrics
                gauges and its own JSON (/server_info, bench_speculative, bench_one_batch_server: `HOME.bench_record`)
                into `RunRecord`s.
- `ids`         which aux ids SGLang reads from a draft config (+1, the first-id rule, its defaults) and captures.
- `launch_rules` how its launch decides the serving causes its own flags decide (`HOME.launch_rules`,
                `HOME.speculating`): --disable-radix-cache, --enable-dp-attention, HiCache,
                --disaggregation-mode, the overlap scheduler, SGLANG_SIMULATE_ACC_LEN, --speculative-adaptive,
                --device, what K means; and what its flags say of how the draft runs (`HOME.evidence`: graphs,
                inherited quantization, chunking, grammars).
- `feed_rules`  what SGLang feeds a draft whose config opts out of aux states, and its aux states over pipeline-parallel
                ranks (`HOME.feed_rules`, asked by checks.draft_feed).
- `launch_lint` what a launch sets that cannot help: knobs in part or past the tree, lossy or faked acceptance, the
                defaults its startup picks (`HOME.launch_warnings`).
- `loads`       what SGLang loads of a draft by the tables (`HOME.table_view`): the ids it reads, d2t, embedding,
                the head (the target's only with draft_vocab_size unset), q/k/v zero-padded on the CPU.
- `said`        what the running SGLang said of a draft over the tables' view (`HOME.said`): its logs' own failure,
                the load its hook recorded in a dump.
- `rule`        what one SGLang startup rule is (`Rule`, the `RuleContext` it reads).
- `rules_table` the rule table (data): how SGLang rewrites or refuses speculative settings, by version.
- `resolver`    the offline resolver over that table (and the setting a launch drafts: `HOME.setting`); SGLang's
                accept-rate formulas by version (`HOME.accept_metrics`).
- `rewrites`    how its startup rewrites of a launch's speculative settings decide cause 12 ndt_override
                (`HOME.rewrite_rule`): the server's report, the rule table at a version, the installed SGLang, or
                the table by version range.
- `startup`     what a server says it runs: its /server_info, its startup log (adjustment warnings, the normalized
                ServerArgs: `HOME.startup_log`), requested vs effective with the rule behind each change.
- `introspect`  ask an installed SGLang (`ServerArgs`) for its own resolution.
- `env`         where the real SGLang lives (its own venv, `make sglang`), whether this host can run it (the host rows:
                avx512_bf16 for the CPU build), the flags and variables a CPU build needs.
- `server`      one real SGLang server as a child process group: its launch arguments, start, /health, stop by its pid.
- `serve`       serve a draft, send prompts to /generate, read /server_info: τ (SGLang's own per-request counts), the
                served traffic, the effective settings; optionally with the in-process hook.
- `dump`        what the hook saw -> an eagle3lib dump of what the draft's fc got, and the load facts (keys taken or
                dropped, embedding / lm_head replaced, layers captured).
- `tree`        SGLang-style draft trees (topk > 1): beams by cumulative score, `num_draft_tokens` nodes kept, the
                tree mask, greedy longest-path acceptance (SGLang v0.5.x rules; the tree replay's and the emulator's).
- `emulator_settings` the emulator's server settings: launch settings -> effective settings (this version's startup
                rewrites, `resolver`) -> its log lines in this version's format.
- `emulator`    `SpecEngine`: SGLang emulated offline, greedy EAGLE-3 chain or tree drafting on an HF target in plain
                PyTorch, with SGLang-format logs (notebook 04's offline throughput runs, the demo sweep).
- `inside/hook/sitecustomize.py`  the in-process hook, imported by every process of the server (never imports
                eagle3lib): it patches SGLang's draft and target model files to record, never to change.
"""
