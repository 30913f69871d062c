"""Serving: what a server is asked to run, what it really runs, and what it feeds the draft; the offline engine.

- `launch`            parse SGLang / vLLM launch commands into the settings they request.
- `sglang_rule`       what one rule is (`Rule`, the `RuleContext` it reads), SGLang version facts.
- `sglang_table`      the rule table (data): how SGLang rewrites or refuses speculative settings, by version.
- `sglang_rules`      the offline resolver over that table; SGLang's accept-rate formulas by version.
- `sglang_introspect` ask an installed SGLang (`ServerArgs`) for its own resolution.
- `serverinfo`        what a server says it runs: `/server_info`, startup-log lines, vLLM's speculative config.
- `crossengine`       one deployment seen by SGLang and vLLM; which boundaries each feeds a draft config; lint.
- `advice`            which layer ids to write per engine for a trained layout; what an engine captures for ids.
- `capturespec`       `CaptureSpec`: the boundaries an engine hands the draft, and a hook tap that gathers them.
- `capture_rules`     what SGLang / vLLM feed an MLA (DeepSeek-V3, Kimi-K2) target's draft and multi-layer drafts,
                      by version, with sources (data), and the resolvers over it.
- `engine_settings`   the emulated SGLang server: launch settings -> effective settings -> its log lines.
- `tree`              SGLang-style draft trees (topk > 1): beams by cumulative score, `num_draft_tokens` nodes kept,
                      the tree mask, greedy longest-path acceptance (SGLang v0.5.x rules).
- `engine`            `SpecEngine`: offline greedy EAGLE-3 speculative decoding on an HF target, SGLang-format logs.
"""
