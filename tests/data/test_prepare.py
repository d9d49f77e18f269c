"""``agentrag-verl data prepare``: presets, columns, counts and errors on a FlashRAG-layout directory built from the
fixture QA set (never the network)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from agentrag_verl.cli import main
from agentrag_verl.data.corpus import load_qa
from agentrag_verl.data.flashrag import DataSourceError, eval_split, read_questions
from agentrag_verl.data.prepare import SourceSpec, presets, select_rows
from agentrag_verl.formats import get_format

QA = load_qa()  # 30 fixture rows

HUB_SPLITS = {
    "nq": ("train", "dev", "test"),
    "triviaqa": ("train", "dev", "test"),
    "popqa": ("test",),
    "hotpotqa": ("train", "dev"),
    "2wikimultihopqa": ("train", "dev"),
    "musique": ("train", "dev"),
    "bamboogle": ("test",),
}
"""The splits each benchmark has in FlashRAG_datasets (what ``eval_split`` chooses from)."""


def write_split(root: Path, dataset: str, split: str, rows: list[dict]) -> None:
    path = root / dataset / f"{split}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def prepare(out: Path, preset: str, fmt: str, *extra: str, flashrag_dir: Path | None = None) -> int:
    """``agentrag-verl data prepare --preset PRESET --format FMT [EXTRA...] [--flashrag-dir DIR] --out OUT``: its exit
    status."""
    argv = ["data", "prepare", "--preset", preset, "--format", fmt, *extra]
    if flashrag_dir is not None:
        argv += ["--flashrag-dir", str(flashrag_dir)]
    return main([*argv, "--out", str(out)])


@pytest.fixture
def flashrag_dir(tmp_path) -> Path:
    """A FlashRAG_datasets-shaped directory: every benchmark gets fixture rows under the splits it has on the hub."""
    root = tmp_path / "FlashRAG_datasets"
    for dataset, names in HUB_SPLITS.items():
        for j, split in enumerate(names):
            # 10 rows per split, ids like FlashRAG's (<split>_<n>), shared across benchmarks on purpose
            rows = [{**QA[(i + 7 * j) % len(QA)], "id": f"{split}_{i}"} for i in range(10)]
            write_split(root, dataset, split, rows)
    return root


def test_searchr1_preset_columns_and_counts(flashrag_dir, tmp_path, capsys):
    out = tmp_path / "out"
    rc = prepare(out, "searchr1_nq_hotpotqa", "hiprag", flashrag_dir=flashrag_dir)
    assert rc == 0
    printed = capsys.readouterr().out
    assert "train.parquet: 20 rows (searchR1_nq=10, searchR1_hotpotqa=10)" in printed
    train = pd.read_parquet(out / "train.parquet")
    test = pd.read_parquet(out / "test.parquet")
    assert len(train) == 20 and len(test) == 70  # 2 x 10 train; 7 test sets x 10
    row = train.iloc[0]
    assert row["data_source"] == "searchR1_nq" and row["agent_name"] == "hiprag_agent"
    assert row["ability"] == "fact-reasoning"
    info = row["extra_info"]
    assert info["id"] == "nq/train_0" and info["source_id"] == "train_0" and info["split"] == "train"
    assert info["question"] == QA[0]["question"].strip()  # already ends with "?"
    # the chat prompt is the format's template with that question
    assert [dict(m) for m in row["prompt"]] == get_format("hiprag").prompt.messages(info["question"])
    assert list(row["reward_model"]["ground_truth"]["target"]) == QA[0]["golden_answers"]
    # ids are unique across the mix although every benchmark uses train_0..train_9; index numbers the file
    assert train["extra_info"].map(lambda e: e["id"]).is_unique
    assert list(train["extra_info"].map(lambda e: e["index"])) == list(range(20))
    # the test file takes each benchmark's evaluation split: test if present, else dev
    sources = {(e["id"].split("/")[0], e["source_id"].split("_")[0]) for e in test["extra_info"]}
    assert ("hotpotqa", "dev") in sources and ("nq", "test") in sources and ("bamboogle", "test") in sources
    assert set(test["data_source"]) == {
        f"searchR1_{d}" for d in ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
    }
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["outputs"]["train"]["rows"] == {"searchR1_nq": 10, "searchR1_hotpotqa": 10}
    assert manifest["preset"] == "searchr1_nq_hotpotqa" and manifest["format"] == "hiprag"


def test_2wiki_80_20_is_a_disjoint_seeded_split(flashrag_dir, tmp_path):
    out = tmp_path / "ms"
    assert prepare(out, "2wiki_80_20", "multistage", flashrag_dir=flashrag_dir) == 0
    train, val = pd.read_parquet(out / "train.parquet"), pd.read_parquet(out / "val.parquet")
    ids_train = set(train["extra_info"].map(lambda e: e["id"]))
    ids_val = set(val["extra_info"].map(lambda e: e["id"]))
    assert (len(ids_train), len(ids_val)) == (8, 2)  # 80 / 20 of the 10 rows (multi-stage B.3)
    assert not ids_train & ids_val and len(ids_train | ids_val) == 10
    assert set(val["extra_info"].map(lambda e: e["split"])) == {"val"}
    assert set(train["agent_name"]) == {"multistage_agent"}
    # same seed -> same split; another seed -> (almost surely) another split
    again = tmp_path / "ms2"
    prepare(again, "2wiki_80_20", "multistage", flashrag_dir=flashrag_dir)
    assert set(pd.read_parquet(again / "val.parquet")["extra_info"].map(lambda e: e["id"])) == ids_val


def test_test7_writes_one_file_per_benchmark(flashrag_dir, tmp_path):
    out = tmp_path / "t7"
    assert prepare(out, "test7", "searchp1", flashrag_dir=flashrag_dir) == 0
    names = sorted(p.name for p in out.glob("*.parquet"))
    assert names == sorted(
        ["test.parquet"]
        + [
            f"test_{d}.parquet"
            for d in ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
        ]
    )
    assert len(pd.read_parquet(out / "test_musique.parquet")) == 10


def test_sampling_and_max_per_source(flashrag_dir, tmp_path):
    rows = read_questions(flashrag_dir / "hotpotqa" / "train.jsonl", dataset="hotpotqa", split="train")
    picked = select_rows(rows, SourceSpec("hotpotqa", "train", sample=4), seed=3)
    assert len(picked) == 4 and picked == select_rows(rows, SourceSpec("hotpotqa", "train", sample=4), seed=3)
    out = tmp_path / "rr"
    assert prepare(out, "reasonrag_questions", "searchr1", "--max-per-source", "3", flashrag_dir=flashrag_dir) == 0
    train = pd.read_parquet(out / "train.parquet")
    assert train["data_source"].value_counts().to_dict() == {
        "searchR1_popqa": 3,
        "searchR1_hotpotqa": 3,
        "searchR1_2wikimultihopqa": 3,
    }


def test_eval_split_preference(flashrag_dir):
    assert eval_split("nq", root=flashrag_dir) == "test"
    assert eval_split("hotpotqa", root=flashrag_dir) == "dev"
    with pytest.raises(DataSourceError, match="no split among"):
        eval_split("nosuch", root=flashrag_dir)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"id": "1", "question": "q?"}', r'missing field\(s\) \["golden_answers"\]'),
        ('{"id": "1", "question": "q?", "golden_answers": "a"}', "wrap the single answer in a list"),
        ('{"id": "1", "question": " ", "golden_answers": ["a"]}', '"question" must be a non-empty string'),
        ('{"id": "1", "question": "q?", "golden_answers": []}', "non-empty list"),
        ("not json", "not valid JSON"),
    ],
)
def test_malformed_rows_name_file_line_and_fix(tmp_path, capsys, line, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "0", "question": "ok?", "golden_answers": ["x"]}\n' + line + "\n")
    with pytest.raises(DataSourceError, match=message) as err:
        read_questions(bad, dataset="bad", split="train")
    assert f"{bad}, line 2" in str(err.value)
    assert main(["data", "prepare", "--input", str(bad), "--format", "searchr1", "--out", str(tmp_path / "o")]) == 2
    assert "line 2" in capsys.readouterr().err


def test_repeated_ids_and_missing_sources_are_errors(tmp_path, flashrag_dir, capsys):
    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"id": "a", "question": "q?", "golden_answers": ["x"]}\n' * 2)
    with pytest.raises(DataSourceError, match="already used on line 1"):
        read_questions(dup, dataset="d", split="train")
    assert prepare(tmp_path / "o", "searchr1_nq_hotpotqa", "searchr1") == 2
    assert "--flashrag-dir DIR" in capsys.readouterr().err
    assert prepare(tmp_path / "o", "nope", "searchr1", flashrag_dir=flashrag_dir) == 2
    assert "choose one of" in capsys.readouterr().err
    (flashrag_dir / "hotpotqa" / "train.jsonl").unlink()
    assert prepare(tmp_path / "o", "searchr1_nq_hotpotqa", "searchr1", flashrag_dir=flashrag_dir) == 2
    assert "has splits ['dev']" in capsys.readouterr().err


def test_every_preset_names_known_benchmarks():
    from agentrag_verl.data.flashrag import TEST_SETS

    for preset in presets().values():
        for output in preset.outputs:
            assert output.sources
            assert {s.dataset for s in output.sources} <= set(TEST_SETS)


@pytest.mark.parametrize("name", sorted(presets()))
def test_every_preset_keeps_training_and_evaluation_questions_apart(name):
    """Selected as ``prepare_outputs`` selects, from benchmarks large enough for every sample (4,000 rows per split,
    ids per split as FlashRAG's): no question of a training output is in a validation or test output."""
    from agentrag_verl.data.flashrag import Question
    from agentrag_verl.data.prepare import check_disjoint

    def rows(dataset: str, split: str) -> list[Question]:
        return [Question(f"{split}_{i}", f"q{i}", ("a",), dataset, split) for i in range(4000)]

    preset = presets()[name]
    selected = {}
    for output in preset.outputs:
        chosen = []
        for spec in output.sources:
            split = spec.split or next(s for s in ("test", "dev", "train") if s in HUB_SPLITS[spec.dataset])
            chosen += select_rows(rows(spec.dataset, split), spec, seed=0)
        selected[output.name] = chosen
    check_disjoint(preset.outputs, selected)
    if name == "reasonrag_questions":  # PopQA has one split: 3,000 of it train, the other 1,000 are tested
        popqa = {o: [r for r in selected[o] if r.dataset == "popqa"] for o in ("train", "test")}
        assert (len(popqa["train"]), len(popqa["test"])) == (3000, 1000)
    if name == "searchr1_nq_hotpotqa":  # the validation sample: 200 of each test set
        assert len(selected["val"]) == 7 * 200 and {r.split for r in selected["val"]} <= {"test", "dev"}


def test_a_training_sample_of_a_test_split_is_refused(flashrag_dir, tmp_path):
    """What the ReasonRAG preset did before: PopQA test questions sampled into training, all of PopQA test tested."""
    from agentrag_verl.data.prepare import OutputSpec, prepare_outputs

    outputs = (
        OutputSpec("train", "train", (SourceSpec("popqa", "test", sample=4),)),
        OutputSpec("test", "test", (SourceSpec("popqa"),)),
    )
    with pytest.raises(DataSourceError, match=r"'train' \(training\) and 'test' \(test\) share 4 questions"):
        prepare_outputs(outputs, tmp_path / "out", format_name="searchr1", flashrag_dir=flashrag_dir)
    assert not (tmp_path / "out").exists()  # refused before anything is written
    fixed = (outputs[0], OutputSpec("test", "test", (SourceSpec("popqa", except_sample=4),)))
    result = prepare_outputs(fixed, tmp_path / "out", format_name="searchr1", flashrag_dir=flashrag_dir)
    assert result.total("train") == 4 and result.total("test") == 6  # the fixture's 10 PopQA test rows
