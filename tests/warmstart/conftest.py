"""Fixtures of the warm-start tests: training rows with the scripted teacher's plans over the fixture corpus
(``agentrag_verl/data/tiny/corpus.jsonl``), served by the real retriever (``retriever_service``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# Questions about the fixture corpus, in the mini-wiki train layout (metadata.hops / metadata.fact).
ROWS = {
    "single_hop": [
        {
            "id": "s0",
            "question": "How long is the river Velda?",
            "golden_answers": ["212 kilometres"],
            "metadata": {
                "type": "single-hop",
                "supporting_ids": ["3"],
                "hops": [
                    {
                        "query": "How long is the river Velda?",
                        "answer": "212 kilometres",
                        "fact": "The Velda is about 212 kilometres long.",
                        "doc_id": "3",
                    }
                ],
            },
        },
        {
            "id": "s1",
            "question": "When was the breakwater of Åsvik Harbour finished?",
            "golden_answers": ["1884"],
            "metadata": {
                "type": "single-hop",
                "supporting_ids": ["1"],
                "hops": [
                    {
                        "query": "When was the breakwater of Åsvik Harbour finished?",
                        "answer": "1884",
                        "fact": "The breakwater of Åsvik Harbour was finished in 1884.",
                        "doc_id": "1",
                    }
                ],
            },
        },
        {
            # Its hop answer is in no passage: the teacher gives up and the writer rejects the trajectory.
            "id": "s2",
            "question": "Who painted the boathouses of Åsvik?",
            "golden_answers": ["Ilse Marrow"],
            "metadata": {
                "type": "single-hop",
                "supporting_ids": ["0"],
                "hops": [
                    {
                        "query": "Who painted the boathouses of Åsvik?",
                        "answer": "Ilse Marrow",
                        "fact": "Ilse Marrow painted them.",
                        "doc_id": "0",
                    }
                ],
            },
        },
    ],
    "multi_hop": [
        {
            "id": "m0",
            "question": "Which university is in the capital of Caldra?",
            "golden_answers": ["Halvern University"],
            "metadata": {
                "type": "multi-hop",
                "supporting_ids": ["6", "7"],
                "hops": [
                    {
                        "query": "What is the capital of Caldra?",
                        "answer": "Mérida-Lune",
                        "fact": "The capital of Caldra is Mérida-Lune.",
                        "doc_id": "6",
                    },
                    {
                        "query": "Which university is in Mérida-Lune?",
                        "answer": "Halvern University",
                        "fact": "Mérida-Lune is home to Halvern University.",
                        "doc_id": "7",
                    },
                ],
            },
        }
    ],
    "common": [
        {
            "id": "c0",
            "question": "What is the capital of Italy?",
            "golden_answers": ["Rome"],
            "metadata": {"type": "common-knowledge", "supporting_ids": [], "fact": "The capital of Italy is Rome."},
        }
    ],
}


@pytest.fixture
def train_dir(tmp_path) -> Path:
    """``<dir>/<dataset>/train.jsonl`` holding :data:`ROWS`."""
    for ds, rows in ROWS.items():
        (tmp_path / ds).mkdir()
        (tmp_path / ds / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path
