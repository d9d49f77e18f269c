"""Reports of an evaluation summary (``metrics.json``): markdown tables, a rich console table, and two plots.

- ``accuracy_vs_search_depth.png``: one point per (format, dataset) at (mean search depth, accuracy); the marker is
  the format, the colour the dataset. Points up and to the left are efficient; a format drifting right on the
  common-knowledge dataset over-searches, one staying at depth 0 on multi-hop questions under-searches.
- ``search_depth_histogram.png``: per format, how many questions made 0, 1, 2, ... retrieval calls (all datasets).

matplotlib is imported lazily with the Agg backend (no display needed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrag_verl.eval.metrics import table_columns

__all__ = [
    "format_value",
    "table_rows",
    "bucket_table",
    "markdown",
    "markdown_tables",
    "rich_table",
    "plot_accuracy_vs_depth",
    "write_reports",
]

_ACCURACY_LABELS = {"em": "EM", "cem": "CEM (ACC)", "f1": "F1", "judge_acc": "judge accuracy"}


def format_value(value: Any, percent: bool) -> str:
    """Table cell text: percentages with one decimal, other floats with two, None as ``-``.

    >>> format_value(0.4567, True), format_value(1.5, False), format_value(None, True), format_value(30, False)
    ('45.7', '1.50', '-', '30')
    """
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if percent:
        return f"{100.0 * float(value):.1f}"
    return f"{float(value):.2f}"


def _reward_columns(summary: Mapping[str, Any]) -> list[str]:
    keys: dict[str, None] = {}
    for fmt in summary["formats"].values():
        for key in fmt["average"]:
            if key.startswith("reward/"):
                keys[key] = None
    return list(keys)


def table_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows (format, dataset, metrics..., rewards...) of the summary table; one ``average`` row per
    format after its datasets."""
    rewards = _reward_columns(summary)
    columns = table_columns()
    header = ["format", "dataset"] + [title for _, title, _ in columns] + [k.split("/", 1)[1] for k in rewards]
    rows: list[list[str]] = []
    for fmt, agg in summary["formats"].items():
        entries = list(agg["datasets"].items()) + [("average", agg["average"])]
        for name, metrics in entries:
            row = [fmt, name]
            row += [format_value(metrics.get(key), pct) for key, _, pct in columns]
            row += [format_value(metrics.get(key), False) for key in rewards]
            rows.append(row)
    return header, rows


def bucket_columns() -> list[tuple[str, str, bool]]:
    """The per-bucket table's columns (key, title, percent): N, Searched, SD, CEM, well-formed no-search answers, then
    each method's own (its over- and under-search rates)."""
    from agentrag_verl.eval.hooks import method_hooks

    own = [c for hooks in method_hooks().values() for c in hooks.columns]
    return [("n", "N", False), ("searched", "Searched", True), ("search_depth", "SD", False), ("cem", "CEM", True),
            ("direct_format", "Direct well-formed", True), *own]  # fmt: skip


BUCKET_NOTE = (
    "By what the policy knows (the knowledge probe's labels): known = answered right closed-book at or above the "
    "probe's threshold; common_unknown = common-knowledge questions it does not know; corpus = the other questions it "
    "does not know. Searched = share of questions answered with a search (%); Direct well-formed = share of the "
    "answers given without a search that are well-formed (%)."
)


def bucket_table(groups: Mapping[str, Mapping[str, Any]], label: str = "format") -> str:
    """The per-bucket table in Markdown, one row per (group, bucket): ``groups`` maps a name (a format, an eval
    stage) to its buckets (:func:`~agentrag_verl.eval.metrics.bucket_metrics`); empty when no group has any. Used by
    ``agentrag-verl eval``, the demo and the benchmarks alike."""
    columns = bucket_columns()
    header = [label, "bucket"] + [title for _, title, _ in columns]
    rows = [
        [name, bucket] + [format_value(m.get(key), pct) for key, _, pct in columns]
        for name, buckets in groups.items()
        for bucket, m in (buckets or {}).items()
    ]
    return markdown(header, rows) if rows else ""


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table.

    >>> print(markdown(["a", "b"], [["1", "2"]]))
    | a | b |
    |---|---|
    | 1 | 2 |
    """
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def markdown_tables(summary: Mapping[str, Any]) -> str:
    """The summary as a markdown table (percentages for EM/CEM/F1/judge/OSR/USR/format; SE in EM points per
    search; rewards are the mean reward of each design on the format's trajectories)."""
    header, rows = table_rows(summary)
    notes = (
        "\nEM, CEM, F1, Judge, OSR, USR and Format in %; SD = mean retrieval calls per question; SE = EM points per "
        "search; OSR / USR columns = a method's over- and under-search rates (its evaluation.py defines them); "
        "Tokens/q = policy tokens per question (trajectory + auxiliary generations); reward columns = mean reward of "
        "each design on the trajectories of the formats it scores."
    )
    text = markdown(header, rows) + "\n" + notes + "\n"
    if buckets := bucket_table({fmt: agg.get("buckets") for fmt, agg in summary["formats"].items()}):
        text += "\n" + BUCKET_NOTE + "\n\n" + buckets + "\n"
    return text


def rich_table(summary: Mapping[str, Any], title: str = "agentrag-verl eval") -> Any:
    """A :class:`rich.table.Table` of the summary (same cells as the markdown table)."""
    from rich.table import Table

    header, rows = table_rows(summary)
    table = Table(title=title, show_lines=False)
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i < 2 else "right", no_wrap=i < 2)
    previous = None
    for row in rows:
        if previous is not None and row[0] != previous:
            table.add_section()
        previous = row[0]
        table.add_row(*row, style="bold" if row[1] == "average" else None)
    return table


def _pyplot() -> Any:
    try:
        import matplotlib
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError('The eval plots need matplotlib: pip install "agentrag-verl[demo]"') from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_accuracy_vs_depth(summary: Mapping[str, Any], path: str | Path, metric: str = "cem") -> Path:
    """Scatter of (mean search depth, accuracy) per (format, dataset); see the module docstring."""
    if metric not in _ACCURACY_LABELS:
        raise ValueError(f"Unknown plot metric {metric!r}; choose one of {sorted(_ACCURACY_LABELS)} (--plot-metric).")
    plt = _pyplot()
    markers = "osD^vP*Xh<>"
    datasets = list(summary.get("datasets") or [])
    for agg in summary["formats"].values():
        datasets += [d for d in agg["datasets"] if d not in datasets]
    colors = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels: dict[tuple[float, float], list[str]] = {}  # formats at the same point share one label
    for i, (fmt, agg) in enumerate(summary["formats"].items()):
        for name, m in agg["datasets"].items():
            y = m.get(metric)
            if y is None:
                continue
            ax.scatter(
                m["search_depth"],
                100.0 * y,
                marker=markers[i % len(markers)],
                color=colors(datasets.index(name) % 10),
                s=60,
                edgecolors="black",
                linewidths=0.5,
            )
            labels.setdefault((round(m["search_depth"], 3), round(100.0 * y, 3)), []).append(fmt)
    for (x, y), names in labels.items():
        ax.annotate(", ".join(names), (x, y), textcoords="offset points", xytext=(5, 5), fontsize=7)
    for name in datasets:
        ax.scatter([], [], color=colors(datasets.index(name) % 10), label=name)
    ax.legend(title="dataset", fontsize=8)
    depths = [m["search_depth"] for agg in summary["formats"].values() for m in agg["datasets"].values()]
    ax.set_xlim(-0.2, max([1.0, *depths]) + 0.5)  # fixed frame: an all-zero run still reads as 0 searches, 0 %
    ax.set_ylim(-3, 103)
    ax.set_xlabel("mean search depth (retrieval calls per question)")
    ax.set_ylabel(f"{_ACCURACY_LABELS[metric]} (%)")
    ax.set_title("Accuracy vs search depth (marker = format)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def plot_depth_histogram(summary: Mapping[str, Any], path: str | Path) -> Path:
    """Grouped bars: number of questions per search depth, one bar per format (all datasets pooled)."""
    plt = _pyplot()
    formats = list(summary["formats"])
    depths = sorted(
        {int(k) for agg in summary["formats"].values() for k in agg["average"]["search_depth_histogram"]} or {0}
    )
    width = 0.8 / max(len(formats), 1)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, fmt in enumerate(formats):
        hist = summary["formats"][fmt]["average"]["search_depth_histogram"]
        xs = [d + (i - (len(formats) - 1) / 2) * width for d in depths]
        ax.bar(xs, [hist.get(str(d), 0) for d in depths], width=width, label=fmt)
    ax.set_xticks(depths)
    ax.set_xlabel("search depth (retrieval calls)")
    ax.set_ylabel("questions")
    ax.set_title("Search-depth histogram")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def write_reports(summary: Mapping[str, Any], out_dir: str | Path, plot_metric: str = "cem") -> dict[str, Path]:
    """Write ``metrics.md`` and the two plots into ``out_dir``; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out / "metrics.md"}
    paths["markdown"].write_text(markdown_tables(summary))
    paths["accuracy_plot"] = plot_accuracy_vs_depth(summary, out / "accuracy_vs_search_depth.png", plot_metric)
    paths["depth_histogram"] = plot_depth_histogram(summary, out / "search_depth_histogram.png")
    return paths
