"""Invalid reward options fail when the manager is built, naming the config key verl reads them from
(``reward.reward_kwargs.<name>``, as the recipes set them), never per sample as ``reward_error``."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from agentrag_verl.methods.hiprag.parts import HipragProcessBonus, HipragStepOptimality
from agentrag_verl.registry import reward_manager_class
from agentrag_verl.rewards import parts as P


def build(name: str, **kwargs):
    config = OmegaConf.create({"reward": {"reward_kwargs": kwargs}})
    return reward_manager_class(name)(config=config, tokenizer=None)


@pytest.mark.parametrize(
    ("name", "key", "value"),
    [
        ("hiprag", "judge_error_policy", "exclud"),  # the example: a typo
        ("hiprag", "denominator", "searches"),
        ("hiprag", "punct", "remove"),
        ("searchr1", "variant", "v0.3"),
        ("multistage", "correctness", "llm"),
        ("multistage", "judge_fallback", "em"),
        ("multistage", "pairwise", "sum"),
        ("multistage", "stage", 3),
        ("searchp1", "correctness", "f1"),
    ],
)
def test_invalid_choice_fails_at_build_naming_the_key(name, key, value):
    with pytest.raises(ValueError, match=rf"reward\.reward_kwargs\.{key}={value!r}") as exc:
        build(name, **{key: value})
    assert "choose one of" in str(exc.value)


def test_invalid_judge_config_fails_at_build():
    with pytest.raises(ValueError, match=r"reward\.reward_kwargs\.over_search_judge.*base_url"):
        build("hiprag", over_search_judge={"base_url": "api.openai.com", "model": "gpt-4.1-mini"})
    with pytest.raises(ValueError, match=r"reward\.reward_kwargs\.judge.*Unknown judge option"):
        build("searchp1", judge={"base_ur": "http://127.0.0.1:8000/v1"})
    # valid choices, None where allowed and an empty judge (filled in later, checked at first use) all build
    build("hiprag", judge_error_policy="optimal", denominator="search", over_search_judge=None)
    build("multistage", stage=2, correctness="em")


def test_unknown_key_still_names_the_section():
    with pytest.raises(ValueError, match=r"Unknown reward option\(s\) \['lamda_p'\].*reward\.reward_kwargs"):
        build("hiprag", lamda_p=0.4)


def test_parts_check_their_choices_when_built():
    answer, fmt = P.AnswerMetrics("hiprag", metric="cem"), P.FormatCheck("hiprag")
    with pytest.raises(ValueError, match=r"Unknown judge_error_policy 'exclud'; choose one of \['exclude'"):
        HipragStepOptimality(judge_error_policy="exclud")
    with pytest.raises(ValueError, match=r"Unknown denominator 'searches'"):
        HipragProcessBonus(answer, fmt, HipragStepOptimality(), denominator="searches")


async def test_through_verls_reward_loop(make_scorer):
    # verl builds the manager in its reward-loop worker from the composed trainer config: the typo fails right there
    with pytest.raises(ValueError, match=r"reward\.reward_kwargs\.judge_error_policy='exclud'"):
        make_scorer(["reward.reward_manager.name=hiprag", "+reward.reward_kwargs.judge_error_policy=exclud"])


async def test_aclose_closes_the_judge_clients_and_keeps_their_metrics(fake_openai_server):
    judge = {"base_url": fake_openai_server.base_url, "model": "fake-model", "api_key_env": None, "max_retries": 0}
    manager = build("hiprag", over_search_judge=judge)
    client = await manager.judge("over_search_judge", judge)
    assert not client._closed
    await manager.aclose()
    assert client._closed  # its HTTP session and background loop are shut
    assert "judge/over_search_judge/requests" in manager.judge_metrics()
