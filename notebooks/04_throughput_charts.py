# %% [markdown]
# # 04 · Throughput charts and the cost model — is speculation paying off, and what would?
#
# The seed measured 90 tok/s without speculation, 56.8 tok/s at accept length ~1.6 (16 draft tokens requested,
# 2 run), 46.7 tok/s at ~1.9 after the steps fix, and 54.8 tok/s after the capture fix: still below baseline.
# A better accept length alone does not decide it. Each speculative round costs more than a plain decode step,
# so what counts is whether τ pays for that cost. This notebook
# 1. puts every measured run on one set of axes,
# 2. fits a two-number cost model, speed = τ / (1 + v + K·c) relative to baseline,
# 3. says which accept length would break even and which `num_steps` is best.
#
# The served runs are the logs and files you give (`log_paths`, `json_paths`, `server_url`); with your own draft
# nothing else is read, and none given is said as "not given". On the embedded demo world (no `draft`) an empty
# list means the sample SGLang log carrying the seed's numbers (`data/samples/sglang_seed_decode.log`). The demo
# engine's own sweep (sections 6 to 8: the correct and the seed's wrong capture, a few minutes on CPU) runs only
# when asked: `run_demo_sweep: true`.

# %% tags=["parameters"]
draft: str = ""                # your draft: given, only the runs given below are read; empty: the demo world
log_paths: list = []           # SGLang or vLLM server logs; empty on the demo world: the seed's sample log
json_paths: list = []          # /server_info dumps, bench_serving / one_batch / vllm bench JSON, RunRecord .jsonl
server_url: str = ""           # live server to read (SGLang /server_info or vLLM /metrics); empty for none
run_demo_sweep: bool = False   # measure the demo engine over num_steps, correct vs seed capture (minutes)
sweep_num_steps: list = [1, 2, 3, 4, 6]  # draft steps per round in the demo sweep (a baseline run is added)
sweep_repeats: int = 3         # timed repeats per setting; the median is kept
tree_replay_samples: int = 8   # held-out samples the chain-vs-tree replay drafts from (every position); 0: skip
baseline_tok_s: float = 0.0    # tok/s without speculation for the served runs; 0 means take it from the records
device: str = "cpu"            # device for the demo sweep ("cuda" on a GPU box)
demo_world: str = ""         # which embedded demo world empty paths mean: "llama" (default) or "mla" (DeepSeek-V3 target, MLA draft)


# %% [markdown]
# ## 1. The served runs: what the logs and files say
# Each file becomes one record per run. Logs are split at launch lines (`server_args=ServerArgs(...)`) and named
# from `# run: <label>` comments. Settings are the **effective** ones (SGLang rewrites `num_draft_tokens` to
# `num_steps + 1` when `topk == 1`). τ is recomputed from raw counters wherever the engine prints them. The
# parse report lists every skipped line: garbage, binary, or cut mid-write.

# %%
# %matplotlib inline

from IPython.display import display

from eagle3lib.names import adopt_old_names
from eagle3lib.report import findings
from eagle3lib.steps import throughput_runs
from eagle3lib.steps.case import case_of
from eagle3lib.steps.part import Inputs
from eagle3lib.demo.world import select_world

adopt_old_names(globals())  # an input's old name given to papermill (draft_path) moves to its name now
select_world(demo_world)

part = throughput_runs.run(case_of(Inputs(
    draft=draft, served_log=",".join(list(log_paths) + list(json_paths)), server_url=server_url,
    run_demo_sweep=run_demo_sweep, sweep_num_steps=tuple(sweep_num_steps), sweep_repeats=sweep_repeats,
    tree_replay_samples=tree_replay_samples, baseline_tok_s=baseline_tok_s, device=device)))
res = part.results
for parsed in res["parsed"]:
    print(parsed.summary())
part.tables["served runs"]

# %% [markdown]
# ## 2. The path so far, as a trajectory
# The runs in the order they were measured, against the dashed no-speculation line. Red points are slower than
# the baseline. Each label gives the effective settings and τ (`?` where the source gives none).

# %%
part.figures["trajectory"]

# %% [markdown]
# ## 3. Cost model fitted to the served runs
# One round costs `1 + v + K·c` plain decode steps: `c` per draft step (it also absorbs the verify cost of one
# more token) and `v` per round (scheduler, the verify pass, the draft extend). Both come from a least-squares
# fit of `τ · baseline / tok_s` over the measured runs. The table shows each run's predicted and measured tok/s.
# With as many runs as unknowns the fit is exact, so its error proves nothing; the notes say when this applies.

# %%
rec = res["fit"].rec
for note in part.notes:
    print("NOTE:", note)
if rec:
    print(f"c = {rec.fit.c:.3f} target steps per draft step, overhead v = {rec.fit.overhead:.2f} per round, "
          f"baseline {rec.fit.baseline_tok_s:.1f} tok/s; RMSE {rec.fit.rmse_tok_s:.2f} tok/s, "
          f"max relative error {rec.fit.max_rel_error:.1%}")
part.tables["served fit"]

# %% [markdown]
# ## 4. Throughput vs accept length, with the break-even
# Each measured run is a point. Each model line gives the predicted tok/s at one `K` as τ grows, up to the chain's
# ceiling of `K + 1`. Where a line crosses the baseline is its break-even accept length τ* = 1 + v + K·c (marked ×).
# If τ* is above `K + 1`, no draft can break even at that `K`.

# %% tags=["index-figure"]
part.figures["served tok/s vs accept length"]

# %% [markdown]
# ## 5. Best num_steps and the accept length it needs
# Using the fitted cost, the prediction scans `K = 1…16`. Per-position rates are used where the runs report them
# (vLLM, the demo engine). Otherwise one i.i.d. α is fitted to the runs' (K, τ) pairs, with τ(α, K) =
# (1 − α^(K+1)) / (1 − α). More draft steps add little τ once α^K is small, but every step costs `c`.

# %%
if rec:
    print(f"acceptance basis: {rec.choice.basis}")
    print(f"predicted best num_steps = {rec.choice.best_num_steps} at {rec.choice.best_speedup:.2f}x; "
          f"it needs accept length >= {rec.choice.break_even:.2f} to beat the baseline")
    display(part.tables["best num_steps"])
part.figures["served speedup vs num_steps"]

# %% [markdown]
# ## 6. Own measurements: the demo engine, correct vs the seed's capture
# A sweep over `num_steps` with warm-up and the median of repeats, plus a baseline without a draft. It uses the
# demo engine's own counters, so τ and per-position rates are exact. The two captures share the engine's costs
# (one `c`, one `v`) and differ only in acceptance. The demo runs on CPU, so its `c` is much larger than a GPU
# server's. Use it for the shape of the curves, not for absolute speedups.

# %%
part.tables["demo sweep"]

# %% [markdown]
# ### 6a. One cost, two acceptances
# Both captures run the same engine, so one fit of `c` and `v` covers them. Each capture's per-position rates
# then predict its own best `num_steps`. With the correct capture the runs should sit above the baseline and
# reach their break-even. The seed's capture should stay below it at every `K`, as the seed's server did.

# %%
for series, x in res["sweep_recs"].items():
    print(f"{series}: {x.choice.basis}; {x.headline} ({x.choice.best_speedup:.2f}x predicted)")
display(part.tables["demo fit"])        # one engine, one fit: the captures share it
part.figures["demo tok/s vs accept length"]

# %% [markdown]
# ### 6b. Measured vs predicted speedup
# The dotted curve is the model's prediction from the first capture's per-position rates. How far it sits from
# the measured points shows how well two cost numbers describe the engine.

# %%
part.figures["demo speedup vs num_steps"]

# %% [markdown]
# ## 7. Per-position acceptance
# Unconditional rates `a_i` = P(first i drafts all accepted), and conditional rates `a_i / a_(i-1)`. A
# conditional rate that falls fast with depth means the draft was trained with too few test-time steps, or is
# asked to draft deeper than it learned. A low first position on every run points at the inputs (capture, vocab
# map), not the depth.

# %%
part.figures["per-position acceptance"]  # per series, the run with the most positions

# %% [markdown]
# ## 8. Chain or tree?
# With no speculative knobs set, SGLang resolves a Llama target to a **tree**: `num_steps 5, topk 4,
# num_draft_tokens 8`. Each draft step keeps the 4 best branches by cumulative draft probability; the 7 best of all
# drafted candidates are verified in one target forward under a tree attention mask, and the longest path matching
# the target's greedy tokens is accepted. A tree raises τ (a sibling can rescue a wrong first choice), but a round
# costs more: a wider verify and `topk`-row draft steps. The replay drafts SGLang's tree from every position of the
# held-out samples, next to the chain of the same depth (`topk 1` reproduces the chain replay exactly); the demo
# engine's own timers give the round cost `1 + v + w·(ndt − 1) + c·steps·(1 + r·(topk − 1))` in decode steps
# (`w` per extra verified token, `c` per draft step, `r` per extra beam row, `v` per round). On CPU `w` is a real
# share of a step; on a GPU at batch 1 the verify is memory-bound and `w ≈ 0`, which is where trees pay.

# %%
tvc = res["tvc"]
if tvc is not None:
    print(tvc.choice.headline)
    print(f"SGLang's auto tree (5, 4, 8): replayed accept length {tvc.auto_tree:.2f}, chain K=5 {tvc.chain_k5:.2f};"
          f" round cost c = {tvc.cost.c:.3f}, w = {tvc.cost.w:.3f}, r = {tvc.cost.r:.2f}, v = {tvc.cost.overhead:.2f}")
part.tables["chain vs tree"]

# %% [markdown]
# Left: the replayed accept length of each setting with its break-even τ* (its round cost: below it the setting is
# slower than no speculation). Right: predicted tok/s. Black dots are what the engine measured for the same
# settings; the star is the predicted best.

# %%
part.figures["chain vs tree"]

# %% [markdown]
# ## 9. Headline
# The served runs (the deployment) decide the headline when they can be fitted, otherwise the demo engine's
# correct capture does. The break-even is the accept length needed at the recommended `num_steps`.

# %%
for key, value in res["headline"].items():
    findings.record(key, value)
findings.current()

# %% [markdown]
# ## Reading the result
# - **Break-even above `K + 1`** (marked "unreachable" on the chart): no draft can pay for that many steps.
#   Use fewer steps or cut the per-round overhead (CUDA graphs, the overlap scheduler, batch size).
# - **Break-even reachable but the draft falls short:** the draft's acceptance is the problem. The replay and
#   hidden-state notebooks say whether the cause is wiring (capture layout, vocab map) or generalization.
# - **The fit error is large:** the runs differ in something the model leaves out (batch size, engine version,
#   hardware). Compare runs only within one set of conditions (see the footer of each chart).
# - **A tree accepts more but is slower:** its round (wider verify `w`, beam rows `r`) costs more than the extra τ
#   buys. That is the case on the CPU demo; on a GPU at small batch `w ≈ 0` and the tree usually wins.
