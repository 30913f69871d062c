"""One name per input (issue 38): `draft`, `target`, `train_data`, `heldout_data`, `launch`, `server_log`,
`serving_dump`, the same in the notebooks' parameters cells, the YAML parameters files and the command lines; the
old names still work for one release, each with a FutureWarning naming the new name."""
from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path

import pytest

from eagle3lib import names
from eagle3lib.names import INPUTS, OLD_FLAGS, OLD_PARAMS
from eagle3lib.report import params as report_params

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
STEMS = [p.stem for p in NOTEBOOKS]


def parameters_cell(path: Path) -> tuple[str, list[str]]:
    """(the source of the ``# %% tags=["parameters"]`` cell, the names it assigns), read from the .py text."""
    text = path.read_text(encoding="utf-8")
    cells = re.split(r"^# %%.*$", text, flags=re.M)
    heads = re.findall(r"^# %%.*$", text, flags=re.M)
    (src,) = [body for head, body in zip(heads, cells[1:]) if 'tags=["parameters"]' in head]
    assigned = []
    for stmt in ast.parse(src).body:
        target = stmt.target if isinstance(stmt, ast.AnnAssign) else (
            stmt.targets[0] if isinstance(stmt, ast.Assign) else None)
        assert isinstance(target, ast.Name), f"{path.name}: the parameters cell holds more than assignments"
        assigned.append(target.id)
    return src, assigned


DECLARED = {p.stem: parameters_cell(p)[1] for p in NOTEBOOKS}


def _yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


def _for_every_notebook(common: dict, sections: dict) -> dict[str, dict]:
    """The parameters each notebook would be given (`params_for` on each notebook's declared names)."""
    return {stem: report_params.params_for(stem, dict.fromkeys(DECLARED[stem]), common, sections.get(stem, {}))[0]
            for stem in STEMS}


# ---------------------------------------------------------------- the notebooks use the names

@pytest.mark.parametrize("path", NOTEBOOKS, ids=STEMS)
def test_every_parameters_cell_uses_only_the_new_names(path):
    _, assigned = parameters_cell(path)
    old = sorted(set(assigned) & set(OLD_PARAMS))
    assert not old, f"{path.name}: old input names {old}; use {[OLD_PARAMS[n] for n in old]}"
    # no other spelling of an input either: a name holding an input's words is the input itself
    spelled = {"draft": r"^draft_", "target": r"^target_", "train_data": r"(train|training|sample)_?data",
               "heldout_data": r"held_?out", "launch": r"^launch_", "server_log": r"^server_log_",
               "serving_dump": r"^(serving_)?dump_?path"}
    odd = [n for n in assigned for new, pat in spelled.items() if n != new and re.search(pat, n)
           and n != "train_data_format"]
    assert not odd, f"{path.name}: {odd} spell an input another way"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=STEMS)
def test_a_notebook_given_an_old_name_by_papermill_reads_it_under_the_new_one(path):
    """papermill injects its parameters after the parameters cell: a notebook taking an input adopts an old name
    (`names.adopt_old_names(globals())`) before the first line that reads an input."""
    text = path.read_text(encoding="utf-8")
    takes = [n for n in DECLARED[path.stem] if n in INPUTS]
    if not takes:
        return
    src, _ = parameters_cell(path)
    after = text[text.index(src) + len(src):]
    assert "adopt_old_names(globals())" in after, f"{path.name} takes {takes} but adopts no old name"
    first_use = min(m.start() for n in takes for m in [re.search(rf"(?<![\w.\"'`]){n}(?![\w\"'`])", after)] if m)
    assert after.index("adopt_old_names(globals())") < first_use


def test_adopt_old_names_moves_the_value_and_warns():
    ns = {"train_data": "", "train_data_path": "/d/train", "draft": ""}
    with pytest.warns(FutureWarning, match="'train_data_path'.*now called 'train_data'"):
        assert names.adopt_old_names(ns) == ["train_data_path"]
    assert ns == {"train_data": "/d/train", "draft": ""}
    ns = {"draft": "/new", "draft_path": "/old"}
    with pytest.warns(FutureWarning) as record:
        names.adopt_old_names(ns)
    assert ns == {"draft": "/new"} and any("'draft' is used" in str(w.message) for w in record)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert names.adopt_old_names({"draft": "/d"}) == []        # nothing old: silent


def test_every_input_is_taken_by_a_notebook_and_the_training_data_by_00_to_03():
    taken = {n for d in DECLARED.values() for n in d}
    assert set(INPUTS) <= taken
    assert [s[:2] for s in STEMS if "train_data" in DECLARED[s]] == ["00", "01", "02", "03"]
    assert set(OLD_PARAMS.values()) <= set(INPUTS)


# ---------------------------------------------------------------- YAML: a top-level key reaches every notebook

@pytest.mark.parametrize("name", INPUTS)
def test_a_top_level_key_sets_the_input_for_every_notebook_that_takes_it(name, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")         # a new name: no warning
        common, sections = report_params.load_params(_yaml(tmp_path, f"{name}: /mine/{name}\n"), STEMS)
        given = _for_every_notebook(common, sections)
    takers = [s for s in STEMS if name in DECLARED[s]]
    assert takers
    assert {s: given[s].get(name) for s in takers} == {s: f"/mine/{name}" for s in takers}
    assert all(name not in given[s] for s in STEMS if s not in takers)


def test_a_section_still_overrides_the_top_level(tmp_path):
    common, sections = report_params.load_params(_yaml(tmp_path, "train_data: /all\n03_hidden_state_diffing:\n"
                                                                 "  train_data: /only03\n"), STEMS)
    given = _for_every_notebook(common, sections)
    assert [given[s]["train_data"] for s in STEMS if "train_data" in DECLARED[s]] == ["/all", "/all", "/all",
                                                                                        "/only03"]


@pytest.mark.parametrize("old", sorted(OLD_PARAMS))
def test_an_old_top_level_key_still_works_and_warns(old, tmp_path):
    new = OLD_PARAMS[old]
    with pytest.warns(FutureWarning, match=rf"'{old}'.*now called '{new}'"):
        common, sections = report_params.load_params(_yaml(tmp_path, f"{old}: /old\n"), STEMS)
    assert common == {new: "/old"}
    given = _for_every_notebook(common, sections)
    assert all(given[s].get(new) == "/old" for s in STEMS if new in DECLARED[s])


def test_old_section_keys_still_work_and_warn(tmp_path):
    text = ("00_checkpoint_audit:\n  sample_data: /a\n01_config_override_discovery:\n  launch_command: vllm serve m\n"
            "  server_log_path: /s.log\n  served_data_path: /h\n02_training_sample_replay:\n  train_data_path: /b\n"
            "  heldout_data_path: /h2\n03_hidden_state_diffing:\n  training_data: /c\n  target_path: /t\n")
    with pytest.warns(FutureWarning) as record:
        common, sections = report_params.load_params(_yaml(tmp_path, text), STEMS)
    said = " ".join(str(w.message) for w in record)
    for old in ("sample_data", "launch_command", "server_log_path", "served_data_path", "train_data_path",
                "heldout_data_path", "training_data", "target_path"):
        assert f"'{old}'" in said and f"'{OLD_PARAMS[old]}'" in said
    given = _for_every_notebook(common, sections)
    assert [given[s].get("train_data") for s in STEMS[:4]] == ["/a", None, "/b", "/c"]
    assert given["01_config_override_discovery"] == {"launch": "vllm serve m", "server_log": "/s.log",
                                                     "heldout_data": "/h"}
    assert given["02_training_sample_replay"]["heldout_data"] == "/h2"
    assert given["03_hidden_state_diffing"]["target"] == "/t"


def test_the_new_name_wins_over_the_old_one_at_the_same_level(tmp_path):
    with pytest.warns(FutureWarning) as record:
        common, _ = report_params.load_params(_yaml(tmp_path, "train_data: /new\ntrain_data_path: /old\n"), STEMS)
    assert common == {"train_data": "/new"}
    assert any("both 'train_data_path' and 'train_data'" in str(w.message) for w in record)


def test_two_old_names_of_one_input_keep_the_first(tmp_path):
    with pytest.warns(FutureWarning) as record:
        common, _ = report_params.load_params(_yaml(tmp_path, "sample_data: /a\ntrain_data_path: /b\n"), STEMS)
    assert common == {"train_data": "/a"} and any("the first is used" in str(w.message) for w in record)


def test_params_for_takes_an_old_name_too():
    """A caller that builds the parameters itself (no YAML) gets the same mapping."""
    with pytest.warns(FutureWarning):
        got, warns = report_params.params_for("00_checkpoint_audit", dict.fromkeys(DECLARED["00_checkpoint_audit"]),
                                              {"draft_path": "/d"}, {"sample_data": "/s"})
    assert got == {"draft": "/d", "train_data": "/s"} and warns == []


@pytest.mark.parametrize("path", sorted((ROOT / "params").glob("*.yaml")), ids=lambda p: p.name)
def test_the_shipped_parameters_files_use_only_the_new_names(path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        common, sections = report_params.load_params(path, STEMS)
    keys = re.findall(r"^\s*#?\s*(\w+):", path.read_text(), flags=re.M)     # commented-out template lines too
    assert not set(keys) & set(OLD_PARAMS), sorted(set(keys) & set(OLD_PARAMS))


# ---------------------------------------------------------------- the command lines

def _parsers():
    from eagle3lib.diagnose.cli import parser as diagnose
    from eagle3lib.hidden.recapture import parser as recapture
    from eagle3lib.replay.cli import parser as replay
    return {"diagnose": diagnose, "replay": replay, "recapture": recapture}


@pytest.mark.parametrize("cli", ["diagnose", "replay", "recapture"])
def test_the_cli_flags_are_the_input_names(cli):
    p = _parsers()[cli]()
    shown = {s for a in p._actions if a.help != "==SUPPRESS==" for s in a.option_strings}
    assert "--train-data" in shown and not shown & set(OLD_FLAGS)
    text = p.format_help()
    assert not re.search(r"--(data|heldout|log|dump)\b(?!-)", text), text


@pytest.mark.parametrize("old,new", sorted(OLD_FLAGS.items()))
def test_an_old_diagnose_flag_still_works_and_warns(old, new):
    from eagle3lib.diagnose.cli import parser
    with pytest.warns(FutureWarning, match=rf"'{old}'.*now called '{new}'"):
        args = parser().parse_args(["--draft", "/d", old, "/x"])
    assert getattr(args, new[2:].replace("-", "_")) == "/x"


def test_the_new_diagnose_flags_do_not_warn():
    from eagle3lib.diagnose.cli import parser
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        args = parser().parse_args(["--train-data", "/t", "--heldout-data", "/h", "--server-log", "/l",
                                    "--serving-dump", "/d"])
    assert (args.train_data, args.heldout_data, args.server_log, args.serving_dump) == ("/t", "/h", "/l", "/d")


@pytest.mark.parametrize("cli,rest", [("replay", ["--draft", "/d", "--out", "/o"]),
                                      ("recapture", ["--target", "/t", "--out", "/o"])])
def test_replay_and_recapture_take_the_old_data_flag_and_still_require_one(cli, rest, capsys):
    p = _parsers()[cli]
    with pytest.warns(FutureWarning, match="'--data'.*now called '--train-data'"):
        assert p().parse_args(rest + ["--data", "/x"]).train_data == "/x"
    assert p().parse_args(rest + ["--train-data", "/y"]).train_data == "/y"
    with pytest.raises(SystemExit) as e:
        p().parse_args(rest)
    assert e.value.code == 2 and "the following arguments are required: --train-data" in capsys.readouterr().err


def test_the_diagnose_inputs_are_the_names():
    """The diagnose CLI's inputs (its Inputs fields, hence its flags and the problems naming them) are the names."""
    from eagle3lib.diagnose.parts import GIVEN
    assert set(INPUTS) <= set(GIVEN)


# ---------------------------------------------------------------- the docs

def test_docs_inputs_names_every_input_and_its_old_names():
    text = (ROOT / "docs" / "inputs.md").read_text()
    for name in INPUTS:
        assert f"`{name}`" in text and f"`--{name.replace('_', '-')}`" in text, name
    for old in list(OLD_PARAMS) + list(OLD_FLAGS):
        assert f"`{old}`" in text, old


def test_the_readme_names_no_input_by_an_old_name():
    text = (ROOT / "README.md").read_text()
    found = [o for o in list(OLD_PARAMS) + list(OLD_FLAGS) if re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text)]
    assert not found, found


# ---------------------------------------------------------------- a report run, end to end (two tiny notebooks)

TINY = '''\
# %% tags=["parameters"]
train_data: str = ""  # the training data
{extra}
# %%
from eagle3lib.names import adopt_old_names
adopt_old_names(globals())
print("TRAIN_DATA=" + train_data)
'''


def test_a_report_run_on_an_old_top_level_key_says_so_and_gives_every_notebook_the_input(tmp_path, capsys):
    import nbformat

    from eagle3lib.report import runner
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    (nbs / "00_a.py").write_text(TINY.format(extra=""))
    (nbs / "01_b.py").write_text(TINY.format(extra='device: str = "cpu"  # a setting\n'))
    import torch

    from eagle3lib.samples.sample import Sample
    from eagle3lib.samples.writers import write_seed_dataset
    sample = Sample("s0", torch.arange(6), torch.ones(6, dtype=torch.int64), torch.randn(6, 3, 8))
    data = write_seed_dataset(tmp_path / "data", [sample]).parent        # training data that reads
    (tmp_path / "p.yaml").write_text(f"train_data_path: {data}\n")
    out = tmp_path / "reports"
    assert runner.main(["--notebooks", str(nbs), "--out", str(out), "-f", str(tmp_path / "p.yaml")]) == 0
    said = capsys.readouterr().out
    assert "warning: 'train_data_path'" in said and "now called 'train_data'" in said
    for stem in ("00_a", "01_b"):
        nb = nbformat.read(out / f"{stem}.ipynb", as_version=4)
        text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
        assert f"TRAIN_DATA={data}" in text, stem
