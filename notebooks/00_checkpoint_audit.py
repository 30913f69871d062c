# %% [markdown]
# # 00 · Checkpoint audit — is the draft what we think it is?
#
# Before blaming the server, check the artifact. A draft can load "fine" in an engine and still be broken:
# old SGLang drops unknown tensor names silently, the speculators converter once saved random weights for
# unmatched keys, d2t/t2d may be missing or stored as absolute ids, and the config's layer ids may be
# written in a convention the engine reads differently. This notebook loads the draft **strictly** the way
# eagle3lib does, and lists everything it finds.

# %% tags=["parameters"]
draft: str = ""             # draft checkpoint dir (config.json + weights); empty: the embedded demo world's draft
target: str = ""            # target model dir (only its embedding/lm_head/tokenizer are read); empty: demo target
train_data: str = ""        # training data for a forward on real tokens; empty: demo training data (seed format)
device: str = "cpu"         # "cuda" on a GPU box
dtype: str = "float32"      # "bfloat16" to load as served
num_steps: int = 3          # TTT steps shown in the forward preview
demo_world: str = ""         # which embedded demo world empty paths mean: "llama" (default) or "mla" (DeepSeek-V3 target, MLA draft)


# %%
from eagle3lib.report import findings
from eagle3lib.steps import checkpoint_audit
from eagle3lib.steps.case import case_of
from eagle3lib.steps.part import Inputs
from eagle3lib.demo.world import select_world

select_world(demo_world)

from eagle3lib.names import adopt_old_names
adopt_old_names(globals())  # an input's old name given to papermill (draft_path, ...) moves to its name now

case = case_of(Inputs(draft=draft, target=target, train_data=train_data, device=device, dtype=dtype,
                      num_steps=num_steps))
part = checkpoint_audit.run(case)
print("draft:", case.draft_path, "| target:", case.target_path or "not given", "| demo world:", case.demo)
a = checkpoint_audit.audit_of(case)     # inside the case's reads: what the part read is not read again
print(a.findings["headline"])

# %% [markdown]
# ## 1. Config: what the draft declares
# One frozen view of `config.json`, whatever tool wrote it (EAGLE, SpecForge/SGLang, vLLM, speculators,
# ModelOpt). The number of aux slots comes from the config; the weights must agree (next section).
# Warnings list unknown or contradictory fields — each is a way engines can disagree about this draft.

# %%
a.config_table

# %%
for w in a.warnings:
    print("WARNING:", w)

# %% [markdown]
# ## 2. Layer ids: which target tensors each engine feeds the aux slots
# SGLang/SpecForge write *output-of-layer* ids (and SGLang adds +1 internally); vLLM/speculators read
# *input-of-layer* ids. The same numbers therefore name different tensors in different engines: one row per
# engine and slot, the boundary it feeds next to the trained one (`as_trained`).

# %% tags=["index-figure"]
checkpoint_audit.engine_layer_table(case, a)

# %% [markdown]
# ### An MLA target's config: what each stack reads
# A DeepSeek-V3 / Kimi-K2 target's config.json is read three ways: transformers (what training captured with),
# SGLang and vLLM (what serves). A field one of them reads but the config lacks is taken from a default or fails
# the load (`absent for`); transformers keeps fields it does not declare (`topk_method`, `scoring_func`) only
# when they are in the file. Not an MLA target: the sentence says so.

# %%
checkpoint_audit.mla_target_fields(a)

# %% [markdown]
# ## 3. Tensors: missing, unexpected, mis-shaped, odd dtypes
# Every tensor the draft needs, under canonical names (`midlayer.*`); `from_target` marks what the draft
# does not ship and the engine takes from the target (the embedding, as SGLang does).

# %%
a.report

# %% [markdown]
# ## 4. Vocab map: d2t / t2d
# `target_id = draft_id + d2t[draft_id]`. A missing map, an `arange`/zeros default or absolute ids stored as
# offsets all make the draft propose the wrong tokens while its logits are fine.

# %%
a.vocab

# %% [markdown]
# ## 5. Size

# %%
a.params

# %% [markdown]
# ## 6. A forward on real tokens
# One training sample through the draft in its training layout: for each position, the next tokens and
# the draft's guesses for steps 0..K-1 (✓ = matches the data). A sane draft gets most step-0 guesses right on
# its own training data; if not, the problem is in the checkpoint, not the server.

# %%
preview = checkpoint_audit.forward_preview(case, a, num_steps=num_steps)
preview

# %% [markdown]
# ## 7. The contract between draft, target and training data
# Each known cause of a poor accept length that these artifacts alone can confirm or rule out
# (`eagle3lib.causes.CATALOGUE`): layer ids and their fallbacks, variant flags, RoPE against the target, the context
# window against the data, the draft's own embedding and lm_head, tensor names an engine would drop, the d2t map,
# and the chat template of the training samples. `not checked` names the input that would decide it; questions
# that depend on the serving engine are asked in notebook 01, with the launch command's engine.

# %%
part.frame()

# %% [markdown]
# ## Findings recorded for the report index

# %%
for key, value in a.findings.items():
    findings.record(key, value)
findings.record_findings(part.name, part.findings)
a.findings
