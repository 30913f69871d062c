# %% [markdown]
# # 01 · Config-override discovery — what the server really runs
#
# In the seed, hours went into tuning `--speculative-num-draft-tokens 16` while SGLang silently ran 2: with
# `--speculative-eagle-topk 1` SGLang rewrites the number of draft tokens to `num_steps + 1`. This notebook
# makes such rewrites impossible to miss. It
# 1. reads the launch command as written and lists every setting it requests,
# 2. resolves the effective settings with a rule table (one row per documented SGLang rewrite, with its version
#    range and source PR) and sets them beside what the server itself reported (`/server_info` or its startup log),
# 3. shows the corrected command, the vLLM-equivalent settings, which target layers each engine feeds this draft,
#    and a lint of settings that cannot help.
#
# With every parameter empty the notebook runs on the demo world, whose server is the seed's: its launch command,
# its corrected command and its SGLang 0.5.6 startup log come from `data/samples/demo_launch.json` (when the demo
# world is not built, the shipped sample configs under `data/samples/` stand in for the target and the draft).
# With your own `draft`, nothing is taken from the demo: an input left empty is reported as not given.

# %% tags=["parameters"]
launch: str = ""            # the command as it was launched (SGLang or vLLM); empty: the demo world's seed launch (demo only)
fixed_command: str = ""     # a corrected command to compare with; empty: the demo world's fixed command (demo only)
sglang_version: str = ""    # SGLang version the server ran; empty: /server_info's, else the demo's 0.5.6 / the library default
server_info_path: str = ""  # a saved GET /server_info JSON of that server; "" for none
server_url: str = ""        # a live SGLang server to read /server_info from, e.g. "http://127.0.0.1:30000"; "" for none
server_log: str = ""        # the server's startup log (repo-relative or absolute); empty: the demo's sample log (demo only)
target: str = ""            # target model folder (its config.json is read); empty: the demo world's target (demo only)
draft: str = ""             # draft folder (its config.json is read); empty: the embedded demo world
served_log_path: str = ""   # decode log / benchmark output with accept lengths (comma-separated); "" for none
train_data: str = ""        # training samples to replay under the served setting; empty: the demo's (demo only)
heldout_data: str = ""      # samples of the prompts the served τ was measured on (e.g. held-out data); empty: train_data
served_traffic_path: str = ""  # the served requests + answers (prompts.jsonl, responses.jsonl): the replay runs on them (vLLM)
serving_dump: str = ""      # a serving dump (decides the served layout); empty: the demo's (demo only), else rules
demo_world: str = ""         # which embedded demo world empty paths mean: "llama" (default) or "mla" (DeepSeek-V3 target, MLA draft)


# %% [markdown]
# ## 1. What the command asks for
# The command is split the way a shell would (quotes, `\` continuations, `VAR=value` prefixes) and every flag is
# kept under the engine's own field name. Flags this workbook does not know are kept and marked `known=False`,
# never dropped. The summary says where the SGLang version and the configs came from, and anything that could
# not be read.

# %%
import pandas as pd
from IPython.display import display

from eagle3lib.serving import layer_reading
from eagle3lib.serving import crossengine, server_logs
from eagle3lib.sglang_engine import introspect as sglang_introspect
from eagle3lib.sglang_engine import resolver as sglang_resolver
from eagle3lib.steps import discovery, served_prediction
from eagle3lib.steps.case import case_of
from eagle3lib.steps.part import Inputs
from eagle3lib.report import findings
from eagle3lib.demo.world import select_world

select_world(demo_world)

from eagle3lib.names import adopt_old_names
adopt_old_names(globals())  # an input's old name given to papermill (draft_path, ...) moves to its name now

case = case_of(Inputs(draft=draft, target=target, train_data=train_data, launch=launch,
                      fixed_command=fixed_command, sglang_version=sglang_version, server_log=server_log,
                      server_info=server_info_path, server_url=server_url, served_log=served_log_path,
                      served_data=heldout_data, served_traffic=served_traffic_path, serving_dump=serving_dump))
settings = discovery.run(case)
launched = settings.results["discovery"]
for note in case.launch_notes:
    print("NOTE:", note)
print(launched.summary())
launched.requested_frame()

# %% [markdown]
# ## 2. Requested vs effective
# One row per speculative setting and per flag given. `effective` is what the server reported when a
# `/server_info` or a startup log is given (`evidence`), else the rule table's prediction. `rule` names the
# table row that explains each change and `source` its PR or commit; `unexplained` means the server changed
# something the table does not know. `agrees` compares the table's prediction with the server's answer
# (empty where the table says nothing about that setting).

# %% tags=["index-figure"]
launched.diff

# %% [markdown]
# ## 3. The log lines that prove it
# The warnings SGLang printed at startup about the settings that changed, and the `server_args=ServerArgs(...)`
# line it logs after normalization. Note the version dependence: SGLang ≤ 0.5.3 reset `max_running_requests`
# to 48 *without* a warning, so a log is not proof of absence; the rule table's `logged` column says which
# rewrites are silent.

# %%
print(launched.log_summary())
launched.log_proof()

# %% [markdown]
# ## 4. Which rules fired, and the whole table for this version
# Each hit says what SGLang does, whether it logs it, and the exact line it prints. The table below it lists
# every rule that holds in this SGLang version (`traced=False`: known at the reference's HEAD only).

# %%
display(launched.hits_frame())
sglang_resolver.sglang_rules_frame(launched.version)

# %% [markdown]
# ## 5. The corrected command
# With `--speculative-num-steps 15` the chain drafts 15 tokens, so `num_draft_tokens 16` already equals
# `num_steps + 1` and nothing is rewritten. Whether 15 steps *pays off* is a throughput question
# (notebook 04): each step costs a draft forward.

# %%
fixed = discovery.fixed(case, launched)
print(fixed.headline())
discovery.side_by_side(launched, fixed)

# %% [markdown]
# ## 6. The same deployment on vLLM
# SGLang's chain of `steps` drafts (`topk 1`, `ndt = steps + 1`) is vLLM's `num_speculative_tokens = K = steps`;
# "SGLang ndt 4" is "vLLM K 3". A tree (`topk > 1`) has no vLLM equivalent. Give `method` explicitly: vLLM
# guesses it from the path otherwise. The engines also mean different things by "accept rate": compare
# τ (accept length, bonus token included), never the printed rates.

# %%
display(pd.DataFrame([launched.vllm, fixed.vllm], index=["as launched", "fixed"]))
print("SGLang", launched.version, "logs accept rate =", sglang_resolver.logged_accept_rate(launched.version))
server_logs.accept_rate_definitions()

# %% [markdown]
# ## 7. Which target layers each engine feeds this draft
# SGLang reads only `eagle_config.eagle_aux_hidden_state_layer_ids` and adds +1 (output-of-layer ids; since
# PR #25454 only when the first id is 1, in the DeepSeek model file). vLLM reads only the top-level
# `eagle_aux_hidden_state_layer_ids`, as input-of-layer ids, without +1. Each falls back to its default
# `[2, L/2, L-3]` when its key is absent, so one config can mean two different drafts. `trained` is what the
# config says the draft was trained on; `as_trained=False` is a draft fed the wrong tensors.

# %%
layer_reading.layer_frame(launched.readings)

# %% [markdown]
# ## 8. Lint: settings that cannot help, and configs the engines read differently
# `error`: the server fails or feeds wrong tensors; `warning`: a setting is rewritten or cannot be filled;
# `info`: worth knowing (for instance the 48-request cap speculative decoding sets).

# %%
crossengine.lint_frame(launched.lint)

# %% [markdown]
# ## 9. Ask SGLang itself (when it is installed here)
# When `sglang` is importable, its own `ServerArgs` is built from the same arguments and its answer is shown
# beside the rule table's; `agree=False` flags a disagreement (an SGLang version whose behaviour the table does
# not know yet). CI never has SGLang; then this says so and the rule table's answer stands alone.

# %%
sglang_introspect.ask(launched.launch, launched.resolution, introspection=launched.introspection)

# %% [markdown]
# ## 10. The causes these settings confirm or rule out
# The rewrite of the speculative knobs (`ndt_override`: confirmed when the server's own log or `/server_info`
# shows it, suspected when only the rule table predicts it), and the contract checks that depend on the engine:
# which boundaries this engine and version capture for the draft config, which variant flags and tensor names
# it reads, the algorithm flag against the draft's architecture, lossy thresholds, sampling, a quantized target.
# Each row names its source (the PR or file the engine fact comes from).

# %%
causes = list(settings.findings)
settings.frame()

# %% [markdown]
# ## 11. Served accept length against the replay, under the setting the server ran
# A served τ says little alone: the same draft accepts more under a tree than under the chain of its depth, so a
# tree-served τ read against a chain prediction shows a loss that is not there (or hides one). Each served run is
# set beside the draft replayed on its training samples under that run's own setting (tree drafting when
# topk > 1) and in the layout the server feeds (a serving dump, else the engine's capture rules); the chain of the
# same depth is shown for contrast. Served well below the replay points at the serving path; in line with it, the
# server does what the draft can. On the demo world the served runs are its engine's, under the seed launch's
# effective settings.

# %%
served_part = served_prediction.run(case, {settings.name: settings})
for note in served_part.notes:
    print(note)
causes += served_part.findings
served_part.tables["served vs replay"]

# %% [markdown]
# ### A vLLM deployment: the draft as the engine loads it, replayed that way
# For a vLLM launch the served τ is also set beside the draft as vLLM really loads it. Each aspect (the layout fed
# to fc, d2t, the embedding, the lm_head) is answered by the strongest source there is: a serving dump (what fc
# got, identified against the target), the server's own log (the aux layers it captured, whether it kept the
# draft's embedding and lm_head, the error it died of), vLLM's own code run on this draft (`vllm_engine.probe`,
# where `.venv-vllm` exists), else eagle3lib's tables; `source` says which. The draft is then replayed as trained,
# as served, and with each differing aspect served alone: a served τ equal to the trained replay rules every wiring
# cause out, one equal to the as-served replay confirms the aspects whose own replay drops.

# %%
display(served_part.tables["as loaded"])
served_part.tables["as served"]

# %% [markdown]
# ## 12. Findings
# The headline names the first speculative knob SGLang changed, the rule, and the first SGLang version that has
# it. The structured findings keep every changed setting, the vLLM equivalent, the layers per engine and the
# lint codes.

# %%
print(launched.headline())
findings.record("headline", launched.headline())
findings.record("config_override", launched.findings())
findings.record("fixed_command", fixed.findings())
findings.record_findings("01 config override discovery", causes)

# %% [markdown]
# ## What next
# If the table above shows a rewrite you did not intend, fix the command and re-read `/server_info` after the
# restart. If the layers each engine feeds differ from what the draft was trained on, see notebook 00
# (checkpoint audit) for the layout the weights expect; if the settings are right but speculation still does
# not pay, notebook 04 (throughput and the cost model) says which accept length would break even.
