"""Search-R1's dataset preset (``agentrag-verl data prepare --preset searchr1_nq_hotpotqa``)."""

from agentrag_verl.data.prepare import TEST7, OutputSpec, Preset, SourceSpec

VAL_PER_TEST_SET = 200
"""Questions per test set in the validation sample (Bamboogle has 125: all of them)."""

PRESETS = {
    # Search-R1's nq_hotpotqa_train (scripts/nq_hotpotqa/data_process.sh): NQ + HotpotQA train, the seven test
    # sets merged for validation. Used by Search-R1, HiPRAG (§4.3), AutoSearch (App. C), Search-P1.
    # val.parquet: a fixed sample of each test set for checkpoint selection during training (Search-P1 B.4 picks the
    # checkpoint with the best validation accuracy, validating every 10 steps: 1,400 questions instead of ~51k).
    "searchr1_nq_hotpotqa": Preset(
        "Search-R1 training mix: NQ + HotpotQA train -> train.parquet; the seven test sets -> test.parquet; "
        f"{VAL_PER_TEST_SET} random questions of each -> val.parquet",
        (
            OutputSpec("train", "train", (SourceSpec("nq", "train"), SourceSpec("hotpotqa", "train"))),
            OutputSpec("test", "test", TEST7),
            OutputSpec("val", "val", tuple(SourceSpec(s.dataset, sample=VAL_PER_TEST_SET) for s in TEST7)),
        ),
    ),
}
