# %% [markdown]
# # 02 · Training-sample replay: wiring bug or generalization gap?
#
# The seed's decisive experiment: run the draft **outside the server** on samples it was trained on.
# If it predicts its own training data about as well as training reported, the draft and its inputs are fine,
# and a poor served accept length is a generalization gap (or a server setting). If it is wrong on data it was
# trained on, the draft is not being fed what it was trained on, or was loaded wrong: a wiring bug.
#
# Here the draft is fed its **training layout** (the aux slots its `fc` was trained on) and, when there is evidence
# of it, the **serving layout** (what the server feeds; a missing slot is fed as zeros, as a server padding its
# capture would). The serving layout is never assumed: it comes from a serving dump identified against the
# target's own boundaries, else from a layout you type, else from the capture rules of the engine and version you
# name; with none of these only the training layout is replayed, and the notebook says which input would decide
# the serving side. Held-out and new-prompt samples separate a generalization gap from a healthy draft, and a
# layout search names the wiring that restores the accuracy.

# %% tags=["parameters"]
draft: str = ""                 # draft checkpoint dir (config.json + weights); empty: the embedded demo world
target: str = ""                # target dir: embedding, lm_head (reference), tokenizer, model (recapture); empty: demo
train_data: str = ""            # samples the draft was TRAINED on; empty: demo training split (seed format)
train_data_format: str = ""     # empty: detect; or "specforge", "seed", "speculators", "modelopt"
heldout_data: str = ""          # in-domain held-out samples; empty: demo held-out split (demo only)
new_prompt_data_path: str = ""  # samples of new / served prompts; empty: demo shifted-domain split (demo only)
serving_dump: str = ""          # what the server fed the draft (SGLang tensor dump or eagle3lib dump); empty: demo's (demo only)
serving_layout: str = ""        # else: the layout the server feeds, typed, e.g. "layer_in.4,layer_in.32"
serving_engine: str = ""        # else: "sglang" or "vllm": the engine's capture rules for this draft config
serving_version: str = ""       # the engine's version for those rules, e.g. "0.5.6"
n_samples: int = 64             # samples per replay, drawn reproducibly with `seed`
n_search: int = 12              # samples per candidate in the layout search
recorded_val_acc: float = -1.0  # step-0 validation accuracy training reported; -1: read training_log_path
training_log_path: str = ""     # jsonl training log with val_acc_step0 (or eval/acc_0); empty: demo log (demo only)
num_steps: int = 3              # draft steps per round (serving --speculative-num-steps)
recapture: bool = True          # let the search run the full target to capture other layers (false for huge targets)
device: str = "cpu"             # "cuda" on a GPU box
dtype: str = "float32"          # "bfloat16" on GPU
seed: int = 0                   # sample draw
demo_world: str = ""         # which embedded demo world empty paths mean: "llama" (default) or "mla" (DeepSeek-V3 target, MLA draft)


# %%
from IPython.display import display

from eagle3lib.checks.restoring import config_findings
from eagle3lib.diagnose.combine import diagnose
from eagle3lib.report import findings
from eagle3lib.replay import evidence, tokenview, verdict
from eagle3lib.steps import sample_replay
from eagle3lib.steps.case import case_of
from eagle3lib.steps.part import Inputs
from eagle3lib.demo.world import select_world

select_world(demo_world)

from eagle3lib.names import adopt_old_names
adopt_old_names(globals())  # an input's old name given to papermill (draft_path, ...) moves to its name now

part = sample_replay.run(case_of(Inputs(
    draft=draft, target=target, train_data=train_data, train_format=train_data_format,
    heldout_data=heldout_data, new_prompt_data=new_prompt_data_path, recorded_acc=recorded_val_acc,
    training_log=training_log_path, serving_dump=serving_dump, serving_layout=serving_layout,
    serving_engine=serving_engine, serving_version=serving_version, n=n_samples, n_search=n_search,
    num_steps=num_steps, recapture=recapture, search_recapture=recapture, device=device, dtype=dtype, seed=seed)))
res = part.results
inp, setup, served, compare = res["inputs"], res["setup"], res["served"], res["layouts"]
print("draft:", inp.draft_path, "| target:", inp.target_path, "| demo world:", inp.demo)
print("serving layout:", served.layout, "<-", served.source, "|", served.detail)
print("recorded validation accuracy:", inp.recorded_acc, f"({inp.recorded_from})")
print("training layout:", setup.training_layout, f"({setup.training_layout_source})")
for note in setup.notes:
    print("NOTE:", note)

# %% [markdown]
# ## 0. The seed's decision
# The draft's step-0 accuracy on its own training samples (as training recorded it, replayed with the shipped
# artifacts, and restored where a search restores it), on the held-out samples, and the verdict they support:
# `wiring/loading` when it fails its own samples, `generalization gap` when those pass and new prompts fail,
# `healthy` otherwise. The served side (the served traffic, the served τ against the replay's prediction, a launch
# that caps τ) is notebook 01's: this notebook names it as not given, and `eagle3lib diagnose` and the report index
# open with the whole table.

# %%
decision = diagnose(part.findings).decision
print(f"{decision.verdict.upper()}: {decision.reason}")
decision.frame()

# %% [markdown]
# ## 1. What is compared, and how accuracy is counted
# Accuracy here is SpecForge's `acc_k`: at step k the draft at position t consumes token t+1+k and its top-1,
# mapped through d2t, must equal the **target's own greedy token** (argmax of the target lm_head over the stored
# final hidden state) for token t+2+k; positions count where `loss_mask[t+k] = 1` (the mask of token t+k, SpecForge's
# convention); a reference outside the draft vocab counts as a miss. Without a stored final state the data's next
# token is the reference (the `reference` column says which). That is the number training logs, so the
# training-layout replay should land within a few points of the recorded accuracy.

# %%
{label: sample_replay.shown(lay, setup.cfg.num_aux) for label, lay in compare.items()}

# %% [markdown]
# ## 2. Replay on the training samples, under each layout
# Per step: `acc` (teacher-forced, as training counts it), `joint_acc` (steps 0..k all right), `cond_acc`
# (step k right given steps < k right: the paper's n-α), `oov_rate` (reference not in the draft vocab), and the
# accept length that chain drafting with k+1 steps would reach from those conditional rates.

# %%
train = res["train"]
part.tables["training samples"]

# %%
for label, r in train.items():
    print(f"--- {label}: fc fed {list(r.layout)}, reference = {r.reference}, skipped {len(r.skipped)}")
    display(r.per_step.round(4))
    for where, why in r.skipped[:5]:
        print("  skipped", where, "->", why)

# %% [markdown]
# ## 3. Accept length: from the conditional rates, and simulated
# `E[accept]` = 1 + Σ_{k=1..n} Π_{j<k} p_j with the conditional rates p_j (the bonus token counted, as SGLang's
# `accept len` does). The simulation chain-drafts from every position with the draft's **own** tokens and states
# (not teacher-forced) and counts what a greedy verifier whose continuation is the reference would accept. With
# the data (or the target's greedy tokens on the true prefix) as reference, accepted tokens equal the reference
# tokens, so the count is exact for such a verifier; `target_agreement` says how often the target's greedy
# token equals the data's. The histogram covers positions with all `num_steps` drafts inside the answer.

# %% tags=["index-figure"]
verdict.plot_replay(train)

# %% [markdown]
# ## 4. Held-out and new prompts, under the training layout
# Same draft, same (training) layout, samples it was not trained on. A large drop from the training samples is
# a generalization gap; similar numbers mean the draft carries over.

# %%
held = res["held"]
part.tables["held-out"]

# %% [markdown]
# ## 5. Verdict
# `wiring` when the training-sample accuracy is far below the recorded validation accuracy (or very low without
# one); `generalization` when it is fine on training samples but clearly lower on held-out / new prompts;
# `healthy` otherwise. One verdict per layout: the served layout's verdict is the answer to "is the server
# feeding the draft right?", the training layout's to "does the draft itself hold up?".

# %%
verdicts = res["verdicts"]
for label, v in verdicts.items():
    print(f"[{label}] {v.verdict.upper()}: {v.reason}")
print("thresholds:", ", ".join(f"{k} {v}" for k, v in verdicts["training"].thresholds.items()))

# %%
verdicts[list(verdicts)[-1]].evidence

# %% [markdown]
# ## 5a. Is the shipped config what was trained?
# The config.json next to the weights is evidence about training, not its record: a converter or a hand edit may
# have set, added or changed a field the engine reads. The training samples decide. They are replayed under the
# shipped config and under every field the serving engines read set otherwise (norm flags, RoPE, `rms_norm_eps`,
# `hidden_act`, the context length; the list is the engine facts'), one at a time, then the best two together.
# A candidate "restores" when it gains more than the margin shown (5 points, or 3 standard errors when that is
# larger) and comes nearer the recorded accuracy. The fix then names the field.

# %%
config_search = res["config_search"]
display(part.tables["config search"])
for f in config_findings(config_search):
    print(f"[{f.status}] {f.summary}" + (f" | fix: {f.fix}" if f.fix else ""))

# %% [markdown]
# ## 5b. Does accuracy fall with position?
# Step-0 accuracy by position bucket on the training samples, under the training layout. A draft whose context
# window (`max_position_embeddings`) is shorter than the served prompts, or whose RoPE differs from the target's,
# loses accuracy deep into a sequence; the dashed line marks the draft's declared context.

# %%
by_position = sample_replay.position_accuracy(inp, setup, n=n_samples, seed=seed)   # the part's samples, unread
display(by_position)
evidence.position_plot(by_position, setup.cfg.max_position_embeddings)

# %% [markdown]
# ## 6. Layout search: which wiring restores the accuracy?
# Only when a replay says `wiring`: starting from that layout (the served one, else the training one), replay the
# plausible wirings: the missing embedding slot, layer ids off by one (output- vs input-of-layer), other slot
# orders, the other final norm, then d2t read as absolute ids or ignored and hidden states paired one token off.
# Candidates need boundaries the samples carry; with `recapture` the target model captures the others on the
# samples' tokens. "Restores" means no longer `wiring`.

# %%
start, search = res["start"], res["search"]
print(f"from the {start[0]} layout: {search.message}" if search is not None else part.tables["layout search"])
search.table.head(12) if search is not None else None

# %% [markdown]
# ## 7. Token view
# Each token coloured by what the draft did for it at the chosen step (green accepted by the chain, red
# rejected, grey not scored); hover for the draft's top-k against the reference. In JupyterLab the browser above
# the static view lets you pick sample, step and position; the exported HTML keeps the static view.

# %%
details = sample_replay.token_details(inp, setup, compare, n=3, seed=seed, num_steps=num_steps)
for label, d in details.items():
    print(f"--- {label}")
    tokenview.show(d, setup.tokenizer, n_static=2)

# %% [markdown]
# ## 8. Findings

# %%
headline = res["headline"]
findings.record("headline", headline)
findings.record_findings(part.name, part.findings)
findings.record("verdicts", {label: x.summary() for label, x in verdicts.items()})
findings.record("replays", {label: r.summary() for label, r in {**train, **held}.items()})
findings.record("layout_search", {"best": search.best, "restored": search.restored, "message": search.message}
                if search is not None else "not run: no replay says wiring")
findings.record("config_search", config_search.to_dict())
print(headline)
