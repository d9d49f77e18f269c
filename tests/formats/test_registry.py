"""Format registry, shared data model and the documentation examples of every format module."""

import doctest
import importlib

import pytest

from agentrag_verl.formats import Format, PromptTemplate, available_formats, format_docs, get_format

MODULES = ["base", "hiprag", "searchr1", "multistage", "reasonrag", "searchp1", "autosearch", "autosearch.tfidf"]


def test_registered_names():
    assert available_formats() == ["searchr1", "hiprag", "multistage", "reasonrag", "searchp1", "autosearch"]
    for name in available_formats():
        fmt = get_format(name)
        assert isinstance(fmt, Format) and fmt.name == name
        assert fmt.prompt.name in fmt.prompts and fmt.prompts[fmt.prompt.name] is fmt.prompt
    # AutoSearch's own grammar: Search-R1's tags, parse and checks, plus its own prompts
    autosearch, searchr1 = get_format("autosearch"), get_format("searchr1")
    assert autosearch.parse is searchr1.parse and autosearch.action_spec is searchr1.action_spec
    assert "intermediate_answer" in autosearch.prompts and "intermediate_answer" not in searchr1.prompts
    assert get_format(" HiPRAG ") is get_format("hiprag")


def test_unknown_name_lists_the_choices():
    with pytest.raises(ValueError, match="hipragg") as err:
        get_format("hipragg")
    for name in available_formats():
        assert name in str(err.value)


@pytest.mark.parametrize("name", ["searchr1", "hiprag", "multistage", "reasonrag", "searchp1", "autosearch"])
def test_every_format_round_trips_its_action_and_prompt(name):
    fmt = get_format(name)
    spec = fmt.action_spec
    open_tag, close_tag = spec.search_tags
    assert close_tag in spec.stop and spec.answer_tags[1] in spec.stop
    action = spec.extract_action(f"{open_tag} some query {close_tag}")
    assert (action.kind, action.content) == ("search", "some query")
    assert "{docs}" in spec.observation_template and spec.budget >= 1
    assert "Doc 1(Title: T) body" in spec.render_observation([{"id": "0", "contents": "T\nbody"}])
    assert spec.answer_tags[0] in spec.force_answer_prefix
    assert "question" in fmt.prompt.slots
    assert "Who?" in fmt.prompt.messages("Who?")[-1]["content"]
    for fn in (fmt.parse, fmt.check_format, fmt.is_valid):
        fn("")  # never raises on empty input
    assert fmt.is_valid("") is False


@pytest.mark.parametrize("module", MODULES)
def test_module_docstring_examples(module):
    if module == "base":
        name = "agentrag_verl.formats.base"
    else:
        name = f"agentrag_verl.methods.{module}" if "." in module else f"agentrag_verl.methods.{module}.grammar"
    mod = importlib.import_module(name)
    assert mod.__doc__ and len(mod.__doc__) > 200  # paper, equations/algorithms and deviations are documented
    result = doctest.testmod(mod)
    assert result.failed == 0


def test_package_docstring_examples():
    import agentrag_verl.formats as formats

    assert doctest.testmod(formats).failed == 0


def test_format_docs_accepts_every_hit_shape():
    hits = [
        {"id": "1", "contents": '"Paris"\nParis is the capital.\nSecond line.'},
        {"document": {"id": "2", "contents": "Lyon\nA city."}, "score": 0.5},
        {"title": "Nice", "text": "On the coast."},
        "Marseille\nA port.",
    ]
    assert format_docs(hits).splitlines() == [
        'Doc 1(Title: "Paris") Paris is the capital.',
        "Second line.",
        "Doc 2(Title: Lyon) A city.",
        "Doc 3(Title: Nice) On the coast.",
        "Doc 4(Title: Marseille) A port.",
    ]
    assert format_docs([]) == ""


def test_prompt_template_slots_are_literal():
    t = PromptTemplate("t", "test", "Q: {question} T: {trajectory}", system="S")
    assert t.slots == ("question", "trajectory")
    # Values are inserted verbatim: braces in them are not slots.
    assert t.format("{trajectory}?", trajectory="{x}") == "Q: {trajectory}? T: {x}"
    assert t.messages("q", trajectory="t")[0] == {"role": "system", "content": "S"}


def test_importing_formats_stays_light():
    import subprocess
    import sys

    code = "import sys, agentrag_verl.formats; print(any(m in sys.modules for m in ('torch', 'numpy', 'ray')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_register_format_makes_a_grammar_available_and_refuses_clashes():
    import dataclasses

    from agentrag_verl.formats import available_formats, get_format, register_format

    custom = dataclasses.replace(get_format("searchr1"), name="Custom_Tags")
    try:
        assert register_format(custom) is custom and get_format("custom_tags") is custom
        assert register_format(custom) is custom  # the same format again (a method package imported twice)
        with pytest.raises(ValueError, match="already registered"):
            register_format(dataclasses.replace(custom, paper="another"))
        with pytest.raises(ValueError, match="already registered"):
            register_format(dataclasses.replace(custom, name="autosearch"))
    finally:
        from agentrag_verl import formats

        formats._FORMATS.pop("custom_tags", None)
    assert "custom_tags" not in available_formats()
