"""Which training questions the pipeline's warm start trains on: ``train_limit`` per set, then ``demo_limits``; the
SFT file holds exactly their demonstrations, whatever else the writer's cache holds."""

from __future__ import annotations

import json

from agentrag_verl.demo.pipeline import PipelineSettings, demo_questions, demos_file, sft_data
from agentrag_verl.eval.data import MINI_WIKI_DIR


def test_demo_limits_cap_sets_after_train_limit(tmp_path):
    s = PipelineSettings(work_dir=tmp_path, data_dir=MINI_WIKI_DIR, train_limit=5, demo_limits={"common": 2})
    chosen = demo_questions(s)
    assert {ds: len(qs) for ds, qs in chosen.items()} == {"common": 2, "multi_hop": 5, "single_hop": 5}
    s.train_limit = None
    assert len(demo_questions(s)["common"]) == 2 and len(demo_questions(s)["single_hop"]) > 5


def test_sft_data_is_the_selection_in_writer_order(tmp_path):
    s = PipelineSettings(work_dir=tmp_path, data_dir=MINI_WIKI_DIR, train_limit=3, demo_limits={"common": 1})
    everything = PipelineSettings(work_dir=tmp_path, data_dir=MINI_WIKI_DIR, train_limit=6)
    cached = [{"dataset": ds, "id": q.id, "kept": True} for ds, qs in demo_questions(everything).items() for q in qs]
    demos_file(s).parent.mkdir(parents=True)
    demos_file(s).write_text("".join(json.dumps(r) + "\n" for r in reversed(cached)))  # an earlier, larger run

    path = sft_data(s)
    got = [(r["dataset"], r["id"]) for r in map(json.loads, path.read_text().splitlines())]
    want = {(ds, q.id) for ds, qs in demo_questions(s).items() for q in qs}
    assert len(got) == len(want) == 7 and set(got) == want
    assert got == [(r["dataset"], r["id"]) for r in reversed(cached) if (r["dataset"], r["id"]) in want]
    stamp = path.stat().st_mtime_ns
    assert sft_data(s) == path and path.stat().st_mtime_ns == stamp  # unchanged selection: the file is not rewritten
