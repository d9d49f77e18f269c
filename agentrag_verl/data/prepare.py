"""FlashRAG QA rows -> verl RL parquet for one trajectory format, with the papers' dataset presets.

One parquet row (what verl's ``RLHFDataset``, our agent loops and our reward managers read):

- ``data_source``: ``searchR1_<dataset>`` (Search-R1's tag, so ``val-core/searchR1_nq/acc`` lines up with other
  Search-R1-style runs; change the prefix with ``data_source_prefix``);
- ``prompt``: chat messages of the format's paper prompt with the question (:attr:`Format.prompt`);
- ``ability``: ``fact-reasoning``;
- ``agent_name``: the agent loop of the format's method (:attr:`agentrag_verl.registry.Method.agent_name`);
- ``reward_model``: ``{"style": "rule", "ground_truth": {"target": [gold answers]}}``;
- ``extra_info``: ``{"index", "split", "question", "id", "source_id"}``. ``index`` numbers the rows of the file;
  ``id`` is ``<dataset>/<source id>``, unique across a mix of benchmarks (FlashRAG ids such as ``train_0`` repeat
  in every benchmark), and is the key of the Search-P1 planner cache (``agentrag-verl planners generate`` reads
  this parquet); ``source_id`` is the id in the FlashRAG file.

Decisions:

- Questions are stripped and end with ``?`` (Search-R1's ``qa_search_*_merge.py`` do this; ``add_question_mark``
  turns it off).
- Sampling (``sample``) and fraction slices (``fraction``) shuffle with ``random.Random(seed)``, so a preset is
  reproducible and the 2Wiki 80/20 parts are disjoint.

>>> rows = [Question("q1", "Who wrote Hamlet", ("Shakespeare",), "nq", "train")]
>>> r = build_rows(rows, split="train", format_name="searchr1")[0]
>>> r["data_source"], r["agent_name"], r["extra_info"]["id"], r["reward_model"]["ground_truth"]["target"]
('searchR1_nq', 'searchr1_agent', 'nq/q1', ['Shakespeare'])
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .flashrag import (
    TEST_SETS,
    DataSourceError,
    Question,
    eval_split,
    load_split,
    normalize_question,
    read_questions,
)

__all__ = [
    "DATA_SOURCE_PREFIX",
    "SourceSpec",
    "OutputSpec",
    "Preset",
    "SHARED_PRESETS",
    "TEST7",
    "presets",
    "build_rows",
    "select_rows",
    "write_parquet",
    "prepare_outputs",
    "PrepareResult",
]

DATA_SOURCE_PREFIX = "searchR1_"
"""Prefix of ``data_source`` tags (Search-R1 / verl's search examples use ``searchR1_<dataset>``)."""


@dataclass(frozen=True)
class SourceSpec:
    """Rows taken from one benchmark split.

    Attributes:
        dataset: FlashRAG config name (``nq``, ``hotpotqa``, ``2wikimultihopqa``...) or a custom name.
        split: Split name; ``None`` = the benchmark's evaluation split (test, else dev, else train).
        sample: Keep a random sample of this many rows (seeded); ``None`` keeps all.
        fraction: Keep the rows whose position in a seeded shuffle falls in ``[lo, hi)`` of the split; used for
            disjoint train/validation parts of one split.
        path: Read this file instead of ``<flashrag_dir>/<dataset>/<split>.jsonl``.
        except_sample: Drop the rows a ``sample`` of this size (same split, seed and fraction) picks: the rest of a
            split that another output of the preset samples from, so the two stay disjoint.
    """

    dataset: str
    split: str | None = None
    sample: int | None = None
    fraction: tuple[float, float] | None = None
    path: str | None = None
    except_sample: int | None = None


@dataclass(frozen=True)
class OutputSpec:
    """One parquet file of a preset: ``<name>.parquet`` with ``extra_info.split = split``."""

    name: str
    split: str
    sources: tuple[SourceSpec, ...]


@dataclass(frozen=True)
class Preset:
    """A named dataset recipe: the files a paper trains or tests on."""

    description: str
    outputs: tuple[OutputSpec, ...]


TEST7 = tuple(SourceSpec(d) for d in TEST_SETS)
"""The seven test sets, one source each (for a method's presets)."""

SHARED_PRESETS: dict[str, Preset] = {
    # the seven benchmarks every paper reports, one file each plus the merged file
    "test7": Preset(
        "The seven test sets (NQ, TriviaQA, PopQA, HotpotQA, 2Wiki, MuSiQue, Bamboogle): test_<dataset>.parquet "
        "each and test.parquet merged",
        tuple(OutputSpec(f"test_{s.dataset}", "test", (s,)) for s in TEST7) + (OutputSpec("test", "test", TEST7),),
    ),
}
"""The presets no paper owns; each method declares its own (:attr:`agentrag_verl.registry.Method.data_presets`)."""


def presets() -> dict[str, Preset]:
    """Every dataset preset by name (``agentrag-verl data prepare --preset NAME``): the methods' own, in method order,
    then the shared ones.

    Raises:
        ValueError: Two methods declare the same preset name.
    """
    from agentrag_verl.registry import methods

    out: dict[str, Preset] = {}
    for method in methods():
        for name, preset in (method.load("data_presets") or {}).items():
            if name in out:
                raise ValueError(f"Dataset preset {name!r} is declared twice (method {method.name!r} too).")
            out[name] = preset
    return out | SHARED_PRESETS


def select_rows(rows: Sequence[Question], spec: SourceSpec, seed: int) -> list[Question]:
    """Apply ``spec.fraction`` / ``spec.sample`` to ``rows`` (seeded shuffle; original order kept otherwise).

    >>> rows = [Question(str(i), "q", ("a",), "d", "train") for i in range(10)]
    >>> a = select_rows(rows, SourceSpec("d", fraction=(0.0, 0.8)), seed=0)
    >>> b = select_rows(rows, SourceSpec("d", fraction=(0.8, 1.0)), seed=0)
    >>> len(a), len(b), sorted(r.id for r in a + b) == sorted(r.id for r in rows)
    (8, 2, True)
    >>> picked = select_rows(rows, SourceSpec("d", sample=3), seed=0)
    >>> rest = select_rows(rows, SourceSpec("d", except_sample=3), seed=0)
    >>> len(picked), len(rest), {r.id for r in picked} & {r.id for r in rest}
    (3, 7, set())
    """
    out = list(rows)
    if spec.fraction is not None:
        lo, hi = spec.fraction
        if not 0.0 <= lo <= hi <= 1.0:
            raise ValueError(f"fraction must satisfy 0 <= lo <= hi <= 1, got {spec.fraction}")
        order = list(range(len(out)))
        random.Random(f"{seed}/{spec.dataset}").shuffle(order)
        keep = sorted(order[round(lo * len(out)) : round(hi * len(out))])
        out = [out[i] for i in keep]
    if spec.sample is not None and spec.sample < len(out):
        out = [out[i] for i in sorted(_sampled(len(out), spec.sample, spec.dataset, seed))]
    if spec.except_sample is not None:
        n = len(out)
        drop = _sampled(n, spec.except_sample, spec.dataset, seed) if spec.except_sample < n else set(range(n))
        out = [r for i, r in enumerate(out) if i not in drop]
    return out


def _sampled(n: int, k: int, dataset: str, seed: int) -> set[int]:
    """Positions of the seeded sample of ``k`` of ``n`` rows that ``SourceSpec.sample`` keeps."""
    return set(random.Random(f"{seed}/{dataset}/sample").sample(range(n), k))


def build_rows(
    rows: Sequence[Question],
    *,
    split: str,
    format_name: str,
    agent_name: str | None = None,
    data_source_prefix: str = DATA_SOURCE_PREFIX,
    add_question_mark: bool = True,
    start_index: int = 0,
) -> list[dict[str, Any]]:
    """verl parquet rows for ``rows`` (see the module docstring for the columns).

    Args:
        rows: The QA rows.
        split: Value of ``extra_info.split``.
        format_name: Trajectory format whose prompt is used (:func:`agentrag_verl.formats.get_format`).
        agent_name: Agent loop name; default: the loop of the format's method.
        data_source_prefix: Prefix of ``data_source``.
        add_question_mark: End questions with ``?`` (Search-R1).
        start_index: ``extra_info.index`` of the first row.
    """
    from agentrag_verl.formats import get_format
    from agentrag_verl.registry import methods

    fmt = get_format(format_name)
    key = format_name.strip().lower()
    if agent_name is None:
        loops = {m.name: m.agent_name for m in methods()}
        if key not in loops:
            raise ValueError(f"no agent loop for format {format_name!r}; pass agent_name (one of {loops})")
        agent_name = loops[key]
    out = []
    for offset, qa in enumerate(rows):
        question = normalize_question(qa.question, add_question_mark)
        out.append(
            {
                "data_source": f"{data_source_prefix}{qa.dataset}",
                "prompt": fmt.prompt.messages(question),
                "ability": "fact-reasoning",
                "agent_name": agent_name,
                "reward_model": {"style": "rule", "ground_truth": {"target": list(qa.golden_answers)}},
                "extra_info": {
                    "index": start_index + offset,
                    "split": split,
                    "question": question,
                    "id": f"{qa.dataset}/{qa.id}",
                    "source_id": qa.id,
                },
            }
        )
    return out


def check_disjoint(outputs: Sequence[OutputSpec], selected: dict[str, list[Question]]) -> None:
    """Refuse a training output that shares a question with an evaluation output (a validation or test file).

    A question is its benchmark, source split and id, so the same id in two splits (FlashRAG's ``test_0`` style ids
    are per split) is two questions, and a sample taken from a test split for training is caught.

    Raises:
        DataSourceError: names both outputs, how many questions they share and a few of them.
    """
    train = [o for o in outputs if o.split == "train"]
    for held_out in (o for o in outputs if o.split != "train"):
        held = {(r.dataset, r.split, r.id) for r in selected[held_out.name]}
        for output in train:
            shared = sorted(
                f"{d}/{split}/{i}" for d, split, i in held & {(r.dataset, r.split, r.id) for r in selected[output.name]}
            )
            if shared:
                raise DataSourceError(
                    f"output {output.name!r} (training) and {held_out.name!r} ({held_out.split}) share {len(shared)} "
                    f"questions, e.g. {shared[:3]}: evaluating on training questions would overstate accuracy. Take "
                    "the training rows from another split, or exclude them from the evaluation source "
                    "(SourceSpec(except_sample=...) for a sampled split)."
                )


def write_parquet(rows: list[dict[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Write rows as parquet, atomically (a temp file renamed into place); parent directories created."""
    import pandas as pd

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    pd.DataFrame(rows).to_parquet(tmp, index=False)
    os.replace(tmp, out)
    return out


@dataclass
class PrepareResult:
    """What :func:`prepare_outputs` wrote: file paths and counts per output and ``data_source``."""

    files: dict[str, str] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    read: dict[str, int] = field(default_factory=dict)

    def total(self, output: str) -> int:
        return sum(self.counts.get(output, {}).values())


def prepare_outputs(
    outputs: Sequence[OutputSpec],
    out_dir: str | os.PathLike[str],
    *,
    format_name: str,
    flashrag_dir: str | os.PathLike[str] | None = None,
    hub: bool = False,
    agent_name: str | None = None,
    data_source_prefix: str = DATA_SOURCE_PREFIX,
    add_question_mark: bool = True,
    seed: int = 0,
    max_per_source: int | None = None,
    manifest: dict[str, Any] | None = None,
) -> PrepareResult:
    """Read every source of ``outputs``, build the rows, write ``<out_dir>/<output>.parquet`` and ``manifest.json``.

    Args:
        outputs: The files to write.
        out_dir: Output directory.
        format_name: Trajectory format (prompt + default agent loop).
        flashrag_dir: Local copy of FlashRAG_datasets (``<dir>/<dataset>/<split>.jsonl``).
        hub: Read from the Hugging Face hub instead (needs network).
        agent_name: Agent loop name override.
        data_source_prefix: Prefix of ``data_source``.
        add_question_mark: End questions with ``?``.
        seed: Seed of sampling / fraction shuffles.
        max_per_source: Keep at most this many rows per source after sampling (quick local runs).
        manifest: Extra keys for ``manifest.json`` (the command line, the preset).

    Raises:
        DataSourceError: A source is missing or malformed, or an output would hold a repeated id.
    """
    out = Path(out_dir)
    result = PrepareResult()
    if not outputs:
        raise ValueError("prepare_outputs needs at least one OutputSpec")
    if flashrag_dir is not None and not Path(flashrag_dir).is_dir():
        raise DataSourceError(
            f"--flashrag-dir {flashrag_dir} is not a directory; point it at a local copy of "
            "RUC-NLPIR/FlashRAG_datasets (huggingface-cli download RUC-NLPIR/FlashRAG_datasets --repo-type dataset "
            "--local-dir DIR)"
        )
    cache: dict[tuple[str, str, str | None], list[Question]] = {}
    selected: dict[str, list[Question]] = {}
    for output in outputs:
        rows: list[Question] = []
        for spec in output.sources:
            split = spec.split
            if spec.path is None and split is None:
                split = eval_split(spec.dataset, root=flashrag_dir, hub=hub)
            split = split or output.split
            key = (spec.dataset, split, spec.path)
            if key not in cache:
                if spec.path is not None:
                    cache[key] = read_questions(spec.path, dataset=spec.dataset, split=split)
                else:
                    cache[key] = load_split(spec.dataset, split, root=flashrag_dir, hub=hub)
                result.read[f"{spec.dataset}/{split}"] = len(cache[key])
            chosen = select_rows(cache[key], spec, seed)
            if max_per_source is not None:
                chosen = chosen[:max_per_source]
            rows.extend(chosen)
        ids = Counter(f"{r.dataset}/{r.id}" for r in rows)
        repeated = [i for i, n in ids.items() if n > 1]
        if repeated:
            raise DataSourceError(
                f"output {output.name!r} would hold repeated question ids {repeated[:5]} (the same source listed "
                "twice?); ids must be unique because rewards and planner caches look questions up by id."
            )
        selected[output.name] = rows
    check_disjoint(outputs, selected)
    agent_used = agent_name
    for output in outputs:
        built = build_rows(
            selected[output.name],
            split=output.split,
            format_name=format_name,
            agent_name=agent_name,
            data_source_prefix=data_source_prefix,
            add_question_mark=add_question_mark,
        )
        agent_used = built[0]["agent_name"] if built else agent_used
        path = write_parquet(built, out / f"{output.name}.parquet")
        result.files[output.name] = str(path)
        result.counts[output.name] = dict(Counter(r["data_source"] for r in built))
    info = {
        **(manifest or {}),
        "format": format_name,
        "agent_name": agent_used,
        "seed": seed,
        "outputs": {name: {"file": result.files[name], "rows": result.counts[name]} for name in result.files},
        "read": result.read,
        "specs": [asdict(o) for o in outputs],
    }
    (out / "manifest.json").write_text(json.dumps(info, indent=1, default=str) + "\n")
    return result
