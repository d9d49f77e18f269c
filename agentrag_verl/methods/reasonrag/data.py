"""ReasonRAG's dataset preset (``agentrag-verl data prepare --preset reasonrag_questions``)."""

from agentrag_verl.data.prepare import OutputSpec, Preset, SourceSpec

PRESETS = {
    # §2.3: RAG-ProGuide questions are 3,000 random questions each of PopQA, HotpotQA, 2Wiki; the outcome-RL baseline
    # (§3.4, RL-ORL) trains Search-R1-style on the same questions. PopQA has one split (test), so its 3,000 training
    # questions come from it and test.parquet holds the rest of PopQA (docs/methods/reasonrag.md).
    "reasonrag_questions": Preset(
        "ReasonRAG (§2.3): 3,000 random questions each of PopQA, HotpotQA and 2WikiMultihopQA -> train.parquet; "
        "PopQA (all but the training questions), HotpotQA, 2Wiki, Bamboogle, MuSiQue test sets (§3.1) -> test.parquet",
        (
            OutputSpec(
                "train",
                "train",
                (
                    SourceSpec("popqa", "test", sample=3000),
                    SourceSpec("hotpotqa", "train", sample=3000),
                    SourceSpec("2wikimultihopqa", "train", sample=3000),
                ),
            ),
            OutputSpec(
                "test",
                "test",
                (SourceSpec("popqa", "test", except_sample=3000),)
                + tuple(SourceSpec(d) for d in ("hotpotqa", "2wikimultihopqa", "bamboogle", "musique")),
            ),
        ),
    ),
}
