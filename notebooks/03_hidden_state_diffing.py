# %% [markdown]
# # 03 · Hidden-state diffing — which tensors does the server really feed the draft?
#
# When replay (notebook 02) says *wiring*, the next question is which tensor is wrong. Layer ids mean different
# things in HF (`hidden_states[i]` = input of layer i), SGLang/SpecForge (output of layer i, with a +1 inside
# SGLang), vLLM/speculators (input of layer i) and EAGLE (hard-coded), so missing, shifted and re-ordered slots
# are the usual silent bugs. Here we run the target ourselves, keep **every** residual-stream boundary
# (`embed`, `layer_in.i`, `final_prenorm`, `final_postnorm`), and match each slot of the training data and of
# a serving dump against all of them — numbers first, then a diagnosis in words, then the ids to write.

# %% tags=["parameters"]
target: str = ""            # target model dir; empty: the demo world's target (demo only)
draft: str = ""             # draft dir (for the proof-of-fix replay); empty: the embedded demo world
train_data: str = ""        # training data with the slots the draft was trained on; empty: demo training data (demo only)
serving_dump: str = ""      # what serving fed the draft (SGLang tensor dump or eagle3lib dump); empty: the demo's (demo only)
sample_index: int = 0       # which training sample to compare
dump_request: int = 0       # which dumped request to compare
replay_samples: int = 16    # training samples replayed for the proof of fix
device: str = "cpu"         # "cuda" on a GPU box
dtype: str = "float32"      # target dtype for the reference capture ("bfloat16" to match serving)
drift_samples: int = 4      # training samples recaptured through the target for the drift check (0: skip)
demo_world: str = ""         # which embedded demo world empty paths mean: "llama" (default) or "mla" (DeepSeek-V3 target, MLA draft)


# %%
# %matplotlib inline

from eagle3lib.engines import advice
from eagle3lib.steps import diffing
from eagle3lib.steps.case import case_of
from eagle3lib.steps.part import Inputs
from eagle3lib.report import findings
from eagle3lib.demo.world import select_world

select_world(demo_world)

from eagle3lib.names import adopt_old_names
adopt_old_names(globals())  # an input's old name given to papermill (draft_path, ...) moves to its name now

case = case_of(Inputs(draft=draft, target=target, train_data=train_data, serving_dump=serving_dump,
                      sample_index=sample_index, dump_request=dump_request, proof_samples=replay_samples,
                      drift_samples=drift_samples, device=device, target_dtype=dtype))
part = diffing.run(case)
s, proof = part.results["sides"], part.results["proof"]
for note in part.notes:
    print("NOTE:", note)
dump = case.loaded_dump
print(f"training sample {s.sample.id}: {s.sample.num_tokens} tokens, {s.sample.num_slots} slots "
      f"declared {s.sample.layout}; dump: " + (f"{len(dump)} request(s) from {dump.manifest.get('source')}"
                                               if dump is not None else "none given"))

# %% [markdown]
# ## 1. Training side: what the draft was trained on
# Each slot of the training sample against every boundary of a fresh reference capture on the same tokens.
# A healthy data pipeline shows one bright cell per row (cosine ≈ 1) at the declared boundary.

# %%
part.tables["training slots"]

# %%
diffing.similarity_plot(s.training)

# %% [markdown]
# ## 2. Serving side: what the server fed the draft
# The same comparison for the dumped request (reference captured on the dump's own tokens). A slot that
# matches another boundary, or none, or is all zeros, is what the draft saw in production.

# %%
part.tables["serving slots"]

# %% tags=["index-figure"]
diffing.similarity_plot(s.serving, s.serving_missing)

# %% [markdown]
# ## 3. Diagnosis in words
# The identified training layout against the identified serving layout: missing or extra slots, padding,
# shifts by a layer (a convention mismatch), permutations, post- vs pre-norm, token alignment, scale or dtype
# damage.

# %%
diffing.explanation_frame(s)

# %% [markdown]
# ## 4. What to write in each engine's config
# The layer ids that make each engine capture the trained layout, and whether it can at all (the embedding
# slot and the final post-norm state are not expressible everywhere).

# %%
adv = advice.advise(s.training.identified, s.reference.num_layers)
adv[["engine", "variant", "key", "ids", "expressible", "why"]]

# %% [markdown]
# ## 5. Proof of fix
# Replay training samples twice: as served (the identified serving layout, zero-filled where the server fed
# nothing) and with the identified training layout. If the diagnosis is right, the second restores the
# draft's training accuracy.

# %%
part.tables["proof of fix"]

# %% [markdown]
# ## 6. The causes this confirms or rules out
# What the server feeds, identified against the target's own boundaries, settles the layout causes (a missing or
# extra slot, a permutation, a slot one layer off, the other side of the final norm) with the dump as evidence.
# The drift check recaptures a few training samples through the target as it is now: the same model gives
# cosine ≈ 1 and norm ratio ≈ 1 per slot; another dtype a small uniform error; a fine-tuned target an error that
# grows with depth. Its fix, when drift is confirmed, is to recapture the training data from the target as it is now
# and retrain: the finding's fix line names the command with these paths (`python -m eagle3lib.hidden.recapture
# --target ... --data ... --layout ... --out ...`; docs/scale.md, "A target of any size").

# %%
part.frame()

# %% [markdown]
# ## Findings recorded for the report index

# %%
for key, value in diffing.diff_summary(s).items():
    findings.record(key, value)
findings.record("advice", {r.engine: r.ids for r in adv.itertuples()})
findings.record("fix_accuracy", diffing.proof_summary(proof) if not isinstance(proof, str) else proof)
findings.record("headline", diffing.diff_headline(s, proof))
findings.record_findings(part.name, part.findings)
findings.current()
