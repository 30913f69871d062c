"""vLLM's home: everything the library does with vLLM in one folder, reading its commands and logs, knowing how it
resolves a method, and running the real vLLM (its own venv, reached only by subprocess). What vLLM reads of a draft,
by version, is rows of the one table `eagle3lib.engines.facts`.

- `home`        `HOME`: the launch, log and metrics readers `serving.homes` hands to the library.
- `launch`      its launch commands (``vllm serve MODEL``, the OpenAI api_server module) and flags (EngineArgs names),
                ``--speculative-config`` and the removed ``--speculative-model``.
- `run_log`     its decode log (``SpecDecoding metrics:`` of every format), its ``vllm:spec_decode_*`` counters and its
                ``vllm bench serve`` result (`HOME.bench_record`) into `RunRecord`s; what its logged accept metrics
                mean (`HOME.accept_metrics`).
- `ids`         which aux ids each vLLM model runner (V1 / V2) reads from a draft config, and what it captures.
- `engine_log`  what a vLLM log says the engine did with the draft: runner, aux ids, embedding / lm_head sharing,
                speculative config, and each exception (its key / shape / file) with its line (`HOME.startup_log`).
- `launch_rules` how its launch decides the serving causes its own flags decide (`HOME.launch_rules`,
                `HOME.speculating`): prefix caching, data parallelism, KV connectors, async scheduling,
                --speculative-config's rejection_sample_method (FLy included), what K means; and what its flags say
                of how the draft runs (`HOME.evidence`: graphs, the draft's quantization and KV dtype, K per batch
                size, chunking).
- `feed_rules`  what each model runner feeds a draft whose config opts out of aux states, and how it relays aux
                states over pipeline-parallel ranks (`HOME.feed_rules`, asked by checks.draft_feed).
- `loads`       what vLLM loads of a draft by the tables (`HOME.table_view`): the ids its runner reads, the fc it
                builds (`vllm_fc_slots`, `aux_opted_out`), d2t, embedding, the borrowed (sliced) head.
- `said`        what the running vLLM said of a draft over the tables' view (`HOME.said`): the first log that says what
                it did with the draft (version, runner, aux ids, sharing, its error), its own code asked (`probe`).
- `method`      how vLLM resolves the speculative method (explicit or inferred from the path), by version, and what
                it makes of a launch: method, K, the SGLang equivalent (`vllm_effective`), the setting
                (`HOME.setting`), its notes as launch warnings (`HOME.launch_warnings`).
- `env`         where the real vLLM lives (its own venv, `make vllm`) and how to run a script of `inside/` in it.
- `probe`       vLLM's own answers about one draft beside its target (`probe`: ids per runner, fc, keys, d2t,
                embedding / lm_head, lengths), cached on disk; what the engine tests check the tables against.
- `server`      one real vLLM OpenAI server as a child process group: start, /health, HTTP, stop by its pid.
- `serve`       serve a draft with the real vLLM OpenAI server, send prompts, measure τ (/metrics and log), stop it.
- `dump`        the real vLLM's offline engine on prompts -> an eagle3lib dump of what its draft's fc got
                (+ its first-step draft logits); `identify` names the dumped slots' boundaries.
- `inside/`     the scripts that run inside the vLLM venv (they never import eagle3lib).
"""
