"""The demo's and the learning benchmark's options that choose the warm start's training questions."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from agentrag_verl.demo.main import add_warm_start_args, apply_warm_start_args, settings_for


def parse(*argv):
    p = argparse.ArgumentParser()
    add_warm_start_args(p)
    settings = settings_for(False, Path("w"), Path("d"))
    apply_warm_start_args(settings, p.parse_args(list(argv)))
    return settings


def test_defaults_are_the_demo_sizes():
    s = parse()
    assert s.train_limit == 50 and s.demo_limits == {"single_hop": 25, "multi_hop": 25, "common": 8}


def test_all_questions_and_set_caps():
    s = parse("--train-limit", "all", "--demo-limit", "common=60", "--demo-limit", "multi_hop=100")
    assert s.train_limit is None and s.demo_limits == {"common": 60, "multi_hop": 100}
    assert parse("--train-limit", "20").train_limit == 20


@pytest.mark.parametrize("argv", [["--train-limit", "0"], ["--train-limit", "some"], ["--demo-limit", "common"]])
def test_bad_values_are_refused(argv, capsys):
    with pytest.raises(SystemExit):
        parse(*argv)
    assert "--" in capsys.readouterr().err
