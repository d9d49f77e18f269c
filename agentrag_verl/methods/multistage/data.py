"""The multi-stage paper's dataset preset (``agentrag-verl data prepare --preset 2wiki_80_20``)."""

from agentrag_verl.data.prepare import OutputSpec, Preset, SourceSpec

PRESETS = {
    # B.3: 2WikiMultihopQA split 80% train / 20% validation.
    "2wiki_80_20": Preset(
        "Multi-stage (B.3): 2WikiMultihopQA train split shuffled, 80% -> train.parquet, 20% -> val.parquet",
        (
            OutputSpec("train", "train", (SourceSpec("2wikimultihopqa", "train", fraction=(0.0, 0.8)),)),
            OutputSpec("val", "val", (SourceSpec("2wikimultihopqa", "train", fraction=(0.8, 1.0)),)),
        ),
    ),
}
