"""``agentrag_verl.options``: options dataclasses built from config mappings reject unknown keys and bad choices with
messages that name the key, the valid choices and where to set them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pytest
from omegaconf import OmegaConf

from agentrag_verl.options import check_choice, check_literals, from_mapping, plain_mapping


@dataclass(frozen=True)
class Opts:
    metric: Literal["em", "cem", "f1"] = "em"
    fallback: Literal["exclude", "optimal"] | None = None
    strict: Literal[True] = True
    lambda_f: float = 0.2


class OptsError(ValueError):
    pass


def test_builds_from_dict_omegaconf_and_none():
    assert from_mapping(Opts, {"metric": "cem", "lambda_f": 0.5}) == Opts(metric="cem", lambda_f=0.5)
    assert from_mapping(Opts, OmegaConf.create({"metric": "f1", "fallback": None})) == Opts(metric="f1")
    assert from_mapping(Opts) == Opts()
    # overrides win over the mapping; keys of another owner in the same section are skipped
    built = from_mapping(
        Opts, {"metric": "cem", "max_resp_len": 9}, overrides={"metric": "f1"}, ignore=["max_resp_len"]
    )
    assert built == Opts(metric="f1")


def test_unknown_key_names_the_key_the_valid_keys_and_where():
    with pytest.raises(OptsError) as info:
        from_mapping(Opts, {"metirc": "em", "lamda_f": 1.0}, what="reward option", where="reward.reward_kwargs",
                     error=OptsError)  # fmt: skip
    assert str(info.value) == (
        "Unknown reward option(s) ['lamda_f', 'metirc'] for Opts; choose from ['fallback', 'lambda_f', 'metric', "
        "'strict']; set them under reward.reward_kwargs"
    )
    with pytest.raises(ValueError, match=r"^Unknown option\(s\) \['x'\] for Opts; choose from \[.*\]$"):
        from_mapping(Opts, {"x": 1})  # no where: no "set them under"


def test_bad_choice_names_the_key_and_the_choices():
    with pytest.raises(
        ValueError, match=r"^Invalid loop option loop\.metric='acc': choose one of \['em', 'cem', 'f1'\]$"
    ):
        from_mapping(Opts, {"metric": "acc"}, what="loop option", where="loop")
    with pytest.raises(ValueError, match=r"fallback='exclud': choose one of \['exclude', 'optimal'\]$"):
        from_mapping(Opts, {"fallback": "exclud"})  # None is allowed, and not listed as a choice
    with pytest.raises(ValueError, match=r"strict=1: choose one of \[True\]"):
        check_literals(Opts(strict=1))  # 1 == True, but it is not the boolean the field asks for


def test_a_config_that_is_not_a_mapping():
    with pytest.raises(OptsError, match="The judge options must be a mapping or an OmegaConf DictConfig, got list"):
        plain_mapping(["model"], what="judge option", error=OptsError)


def test_check_choice():
    assert check_choice("metric", "cem", ("em", "cem")) == "cem"
    with pytest.raises(ValueError, match=r"^Unknown metric 'acc'; choose one of \['em', 'cem'\]; set --metric$"):
        check_choice("metric", "acc", ("em", "cem"), where="--metric")
    with pytest.raises(ValueError, match="Unknown stage True"):
        check_choice("stage", True, (1, 2))


def test_the_package_option_classes_use_it():
    from agentrag_verl.agent_loops.config import SearchLoopConfig
    from agentrag_verl.judges import JudgeConfig, JudgeConfigError
    from agentrag_verl.methods.reasonrag.mcts import MCTSConfig

    with pytest.raises(JudgeConfigError, match=r"Unknown judge option\(s\) \['modle'\] for JudgeConfig; .*'model'"):
        JudgeConfig.from_config({"modle": "m"})
    with pytest.raises(ValueError, match=r"Unknown agent-loop option\(s\) \['budegt'\].*'budget'.*set them under the"):
        SearchLoopConfig.from_sources({"format": "hiprag", "budegt": 2}, None)
    loop = SearchLoopConfig.from_sources({"format": "hiprag", "budget": 2}, {"agentrag": {"budget": 3}})
    assert loop.budget == 3  # custom wins
    with pytest.raises(ValueError, match=r"Unknown MCTS option\(s\) \['alpah'\] .*set them under mcts"):
        MCTSConfig.from_config({"alpah": 0.5})
