"""benchmarks/self_knowledge.py: AUROC and its standard error, the folds, and the nested-CV linear probe on planted
signals; the cached-prefix passes against full ones on the tiny random model."""

from __future__ import annotations

import math
import random

import pytest

from tests.benchmarks.test_learning import load


@pytest.fixture(scope="module")
def sk():
    return load("self_knowledge")


def test_auroc_is_mann_whitney_with_ties_halved(sk):
    # positives 3, 1, 2; negatives 2, 0: pairs won 1+1, 0+1, 0.5+1 -> 4.5 of 6
    assert sk.auroc([3, 1, 2, 2, 0], [True, True, True, False, False]) == pytest.approx(4.5 / 6)
    assert sk.auroc([0, 1], [True, False]) == 0.0
    with pytest.raises(ValueError, match="both classes"):
        sk.auroc([1, 2], [True, True])


def test_hanley_mcneil_standard_error(sk):
    a, n1, n2 = 0.8, 65, 182  # Hanley & McNeil (1982), Eq. 2
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    se = math.sqrt((a * (1 - a) + (n1 - 1) * (q1 - a * a) + (n2 - 1) * (q2 - a * a)) / (n1 * n2))
    scores = [1.0] * 52 + [0.0] * 13 + [0.0] * 182  # 52 of 65 positives above every negative, rest tied
    labels = [True] * 65 + [False] * 182
    r = sk.auroc_ci(scores, labels)
    assert r["auroc"] == pytest.approx(0.8 + 0.5 * 0.2)  # ties count one half
    assert (r["positive"], r["negative"]) == (65, 182)
    assert sk.auroc_ci([0.9] * 52 + [0.1] * 13 + [0.5] * 182, labels)["se"] == pytest.approx(se, abs=1e-4)


def test_folds_are_stratified_and_partition_the_indices(sk):
    labels = [i % 4 == 0 for i in range(103)]
    folds = sk.stratified_folds(labels, 5, seed=3)
    assert sorted(i for f in folds for i in f) == list(range(103))
    positives = [sum(labels[i] for i in f) for f in folds]
    assert max(positives) - min(positives) <= 1


def test_linear_probe_reads_a_planted_direction_and_not_noise(sk):
    torch = pytest.importorskip("torch")
    rng = random.Random(0)
    n, d, layers = 160, 24, 4
    labels = [rng.random() < 0.3 for _ in range(n)]
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(layers, n, d, generator=gen, dtype=torch.float64)
    signal = torch.tensor([1.5 if y else -1.5 for y in labels], dtype=torch.float64)
    hidden[3, :, 5] += signal  # only layer 3 holds the label, along one coordinate
    probe = sk.linear_probe(hidden, labels)
    assert sk.auroc(probe["scores"], labels) > 0.9
    assert all(c["layer"] == 3 for c in probe["chosen"])  # chosen inside each training part
    curve = probe["learning_curve"]
    assert set(curve) == {"18", "35", "70"}  # 140 is not below a training part of 128 questions
    assert curve["70"]["auroc_mean"] > curve["18"]["auroc_mean"] - 0.05
    noise = sk.linear_probe(torch.randn(layers, n, d, generator=gen, dtype=torch.float64), labels)
    assert abs(sk.auroc(noise["scores"], labels) - 0.5) < 0.15  # out of fold: no score from fitting the noise


def test_cached_prefix_gives_the_full_forward_pass_states_and_answer_probability(sk, tiny_model_dir):
    """The hidden states at the decision point and the greedy answer's log-probability, computed past the shared
    prompt's cached keys and values, equal those of a forward pass over each whole sequence."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    wts = load("when_to_search")
    questions = {"common/a": "What is the capital of France?", "common/b": "Who built Kessrow Bridge?"}
    decided = wts.decisions(tiny_model_dir, questions, "hiprag")
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    lm = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    records = {}
    for key, text in wts.decision_points(tok, questions, "hiprag").items():
        ids = tok(text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            states = lm(torch.tensor([ids]), output_hidden_states=True).hidden_states
        assert torch.allclose(torch.stack([h[0, -1] for h in states]), decided[key][1], atol=1e-4)
        answer = tok("Paris", add_special_tokens=False)["input_ids"]
        response = tok("</reasoning>\n</step>\n</think>\n<answer>", add_special_tokens=False)["input_ids"]
        closing = tok("</answer>", add_special_tokens=False)["input_ids"]
        records[key] = {"prompt_ids": ids[:-3], "response_ids": ids[-3:] + response + answer + closing}
        full = ids + response + answer
        with torch.no_grad():
            logp = lm(torch.tensor([full])).logits[0, -len(answer) - 1 : -1].log_softmax(-1)
        records[key]["expected"] = logp.gather(1, torch.tensor(answer)[:, None]).sum().item()
    records["common/none"] = {"prompt_ids": [1, 2], "response_ids": [3, 4]}  # no answer tags: no confidence
    confidence = sk.answer_confidence(tiny_model_dir, records)
    for key in questions:
        assert confidence[key] == pytest.approx(records[key]["expected"], abs=1e-4)
    assert confidence["common/none"] == -math.inf
