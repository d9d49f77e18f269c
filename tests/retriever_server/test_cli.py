"""``python -m retriever_server``: Search-R1 flag aliases, the query subcommand, serving Search-R1's files."""

from __future__ import annotations

import json

import pytest

from agentrag_verl.testing import write_corpus
from retriever_server.cli import build_parser, main
from retriever_server.retriever import IndexSource, LoadOptions, load_source
from tests import cli_errors

from .conftest import synthetic_corpus


def test_searchr1_flags_are_aliases():
    # Search-R1's launch line for its retrieval server, verbatim flags.
    args = build_parser().parse_args(
        "serve --index_path e5_Flat.index --corpus_path wiki-18.jsonl --topk 3 --retriever_name e5 "
        "--retriever_model intfloat/e5-base-v2 --faiss_gpu".split()
    )
    assert (args.index, args.corpus_path, args.topk, args.retriever_name) == ("e5_Flat.index", "wiki-18.jsonl", 3, "e5")
    assert args.retriever_model == "intfloat/e5-base-v2" and args.faiss_gpu
    assert args.host == "127.0.0.1"  # never 0.0.0.0 unless asked
    build = build_parser().parse_args("build --corpus_path c.jsonl --retriever_model m --out d".split())
    assert (build.corpus, build.model, build.index_type) == ("c.jsonl", "m", "Flat")


def test_query_prints_ranked_titles(index_dir, capsys):
    assert main(["query", "--index", str(index_dir), "Who wrote the novel The Salt Clock?"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Q: Who wrote the novel The Salt Clock?")
    assert "  1. 0." in out and "The Salt Clock  [id 26]" in out


def test_query_against_a_running_server(server, capsys):
    assert main(["query", "--url", server.base_url, "--topk", "2", "--json", "capital of Caldra"]) == 0
    result = json.loads(capsys.readouterr().out)["result"]
    assert len(result) == 1 and len(result[0]) == 2


def test_errors_exit_2_with_a_hint(tmp_path, capsys):
    assert main(["query", "--index", str(tmp_path), "q"]) == 2
    assert "no complete index" in capsys.readouterr().err
    assert main(["query", "q"]) == 2
    assert "--index DIR" in capsys.readouterr().err
    assert main(["query", "--index", str(tmp_path / "e5_Flat.index"), "q"]) == 2
    assert "--corpus_path" in capsys.readouterr().err


def test_serves_searchr1_index_file_and_corpus(index_dir, corpus_file, minilm_dir, retriever, tmp_path):
    """Search-R1's artifacts (a faiss index file + wiki-18.jsonl) load directly; the corpus is converted once."""
    source = IndexSource(str(index_dir / "index.faiss"), str(corpus_file), "mean", minilm_dir)
    loaded = load_source(source, LoadOptions(corpus_store=str(tmp_path / "store")))
    assert (tmp_path / "store" / "records.jsonl").is_file()
    question = ["In what year did Orla Brennick found Marrow & Tilde Instruments?"]
    got, want = loaded.retrieve(question, 3), retriever.retrieve(question, 3)
    # the same passages in the same order; the scores of two encoder instances agree to float rounding (oneDNN may
    # pick another kernel for the same shapes on a loaded box)
    assert [[h["document"] for h in hits] for hits in got] == [[h["document"] for h in hits] for hits in want]
    assert [[h["score"] for h in hits] for hits in got] == [
        pytest.approx([h["score"] for h in hits], rel=1e-5) for hits in want
    ]


# ---- bad input: one line saying what, why and how to fix; non-zero exit; no traceback; nothing left behind ----------


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    return cli_errors.run_cli(main, argv, capsys)


def one_line_error(argv: list[str], capsys, *expected: str) -> str:
    return cli_errors.one_line_error(main, argv, capsys, *expected)


@pytest.fixture()
def five_passages(tmp_path):
    return write_corpus(synthetic_corpus(5), tmp_path / "five.jsonl")


def _build(corpus, model, out, *extra: str) -> list[str]:
    return ["build", "--corpus", str(corpus), "--model", str(model), "--out", str(out), "--no-progress", *extra]


def test_build_bad_paths(tmp_path, five_passages, tiny_bert_dir, capsys):
    out = tmp_path / "out"
    one_line_error(_build(tmp_path / "nope.jsonl", tiny_bert_dir, out), capsys, "--corpus", "does not exist")
    one_line_error(_build(tmp_path, tiny_bert_dir, out), capsys, "--corpus", "is a folder")
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    one_line_error(_build(five_passages, tiny_bert_dir, a_file), capsys, "--out", "is a file")
    busy = tmp_path / "home"
    (busy / "notes").mkdir(parents=True)
    one_line_error(_build(five_passages, tiny_bert_dir, busy), capsys, "holds files that are not an index build")
    assert not out.exists() and sorted(p.name for p in busy.iterdir()) == ["notes"]  # nothing written


def test_build_model_that_is_not_a_model(tmp_path, five_passages, capsys):
    empty = tmp_path / "empty_model"
    empty.mkdir()
    one_line_error(_build(five_passages, empty, tmp_path / "o1"), capsys, "has no config.json", "--model")
    one_line_error(_build(five_passages, five_passages, tmp_path / "o2"), capsys, "is a file", "--model")
    one_line_error(_build(five_passages, tmp_path / "gone", tmp_path / "o3"), capsys, "does not exist", "--model")
    broken = tmp_path / "broken_model"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    one_line_error(_build(five_passages, broken, tmp_path / "o4"), capsys, "cannot be loaded", "--model")
    assert not any((tmp_path / f"o{i}").exists() for i in range(1, 5))


def test_build_ivf4096_on_five_passages_then_the_corrected_rerun(tmp_path, five_passages, tiny_bert_dir, capsys):
    out = tmp_path / "idx"
    one_line_error(
        _build(five_passages, tiny_bert_dir, out, "--index-type", "IVF4096,Flat"),
        capsys,
        "needs at least 4096 training vectors",
        "--index-type Flat",
    )
    assert run_cli(_build(five_passages, tiny_bert_dir, out), capsys)[0] == 0  # nothing left to trip on
    one_line_error(_build(five_passages, tiny_bert_dir, tmp_path / "x", "--index-type", "Nonsense"), capsys, "factory")


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--batch-size", "0"),
        ("--chunk-size", "-1"),
        ("--max-passages", "0"),
        ("--train-size", "-5"),
        ("--max-length", "x"),
    ],
)
def test_build_counts_must_be_positive(tmp_path, five_passages, flag, value, capsys):
    line = one_line_error(_build(five_passages, "m", tmp_path / "o", flag, value), capsys, flag, "at least 1")
    assert "see python -m retriever_server build --help" in line


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b'{"id": "1", "contents": "caf\xe9"}', "line 2: not UTF-8 (byte 0xe9"),
        (b'{"contents": "no id"}', 'line 2: the passage has no "id" field'),
        (b'{"id": 7, "contents": "number id"}', 'line 2: the passage has "id": 7, not a non-empty string'),
        (b'{"id": "0", "contents": "again"}', "line 2: id '0' is already used on line 1"),
    ],
    ids=["non-utf8", "missing-id", "non-string-id", "duplicate-id"],
)
def test_build_bad_corpus_rows_name_file_and_line(tmp_path, tiny_bert_dir, line, expected, capsys):
    corpus = tmp_path / "bad.jsonl"
    corpus.write_bytes(b'{"id": "0", "contents": "fine"}\n' + line + b"\n")
    one_line_error(_build(corpus, tiny_bert_dir, tmp_path / "idx"), capsys, "bad.jsonl", expected)
    assert not (tmp_path / "idx").exists()  # no corpus/records.jsonl.tmp, no offsets.i64.tmp, no folder


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--port", "99999"], "99999 is not a TCP port; choose one from 1 to 65535"),
        (["--port", "0"], "0 is not a TCP port"),
        (["--port", "http"], "'http' is not a port number"),
        (["--topk", "0"], "argument --topk: 0 is not a whole number of at least 1"),
        (["--max-body-bytes", "-1"], "argument --max-body-bytes"),
        (["--header-timeout", "0"], "argument --header-timeout: 0 is not a number greater than 0"),
        (["--max-batch-size", "0"], "argument --max-batch-size"),
        (["--replicas", "0"], "argument --replicas"),
        (["--num-threads", "100000"], "argument --num-threads: 100000 is more than the"),
        (["--body-deadline", "0"], "argument --body-deadline: 0 is not a number greater than 0"),
        (["--max-connections", "0"], "argument --max-connections"),
    ],
)
def test_serve_bad_numbers(index_dir, args, expected, capsys):
    one_line_error(["serve", "--index", str(index_dir), *args], capsys, expected)


def test_serve_and_query_bad_indexes(tmp_path, index_dir, corpus_file, capsys):
    import shutil

    one_line_error(["serve", "--index", str(tmp_path / "nope")], capsys, "--index", "does not exist")
    truncated = tmp_path / "truncated"
    shutil.copytree(index_dir, truncated)
    data = (truncated / "index.faiss").read_bytes()
    (truncated / "index.faiss").write_bytes(data[: len(data) // 3])
    for command in (["serve", "--index", str(truncated)], ["query", "--index", str(truncated), "q"]):
        one_line_error(command, capsys, "index.faiss has", "truncated", "--overwrite")
    # a file that is not a faiss index, given as Search-R1's index file: refused before the corpus is converted
    store = tmp_path / "corpus.store"
    argv = ["query", "--index", str(corpus_file), "--corpus_path", str(corpus_file), "--retriever_model", "m", "q"]
    one_line_error([*argv, "--corpus-store", str(store)], capsys, "faiss cannot read", "not a faiss index")
    assert not store.exists()
    argv = ["query", "--index", str(index_dir / "index.faiss"), "--corpus_path", str(tmp_path), "--retriever_model"]
    one_line_error([*argv, "m", "q"], capsys, "--corpus_path", "is a folder")


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ("nprobe=-5", "nprobe=-5 must be a whole number of at least 1"),
        ("nprobe=64", "faiss cannot set 'nprobe=64' on this IndexFlatIP"),  # the fixture index is Flat
        ("nprobe", "'nprobe' is not name=number"),
    ],
)
def test_search_params_faiss_cannot_use_are_refused_in_one_line(index_dir, params, expected, capsys):
    one_line_error(["query", "--index", str(index_dir), "--search-params", params, "q"], capsys, expected)


def test_serve_a_folder_without_an_index_says_what_is_there(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    line = one_line_error(["serve", "--index", str(empty)], capsys, "no complete index", "the folder is empty")
    assert "build was started" not in line
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    one_line_error(["serve", "--index", str(other)], capsys, "no complete index", "nothing in it comes from a build")
    started = tmp_path / "started"
    started.mkdir()
    (started / "chunks.done").write_text("")
    one_line_error(["serve", "--index", str(started)], capsys, "a build was started there")


def test_serve_on_a_busy_port_or_a_foreign_host_fails_before_loading_in_one_line(index_dir, capsys, caplog):
    import logging
    import socket

    from agentrag_verl.demo.servers import free_port

    with socket.socket() as busy, caplog.at_level(logging.INFO):
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        argv = ["serve", "--index", str(index_dir), "--port", str(port)]
        one_line_error(argv, capsys, f"port {port} on 127.0.0.1 is already in use", "--port")
        argv = ["serve", "--index", str(index_dir), "--host", "999.1.1.1", "--port", str(free_port())]
        one_line_error(argv, capsys, "--host 999.1.1.1 is not an address of this machine", "127.0.0.1")
    said = [r.getMessage() for r in caplog.records]
    assert not [m for m in said if m.startswith(("Serving", "Loaded encoder"))], said  # refused before the load


def test_query_unreachable_url(capsys):
    from agentrag_verl.demo.servers import free_port

    url = f"http://127.0.0.1:{free_port()}"
    line = one_line_error(["query", "--url", url, "q"], capsys, "cannot reach", url, "--url")
    assert "ConnectError" in line


def test_debug_shows_the_traceback(tmp_path, capsys):
    with pytest.raises(FileNotFoundError):
        main(["serve", "--index", str(tmp_path / "nope"), "--debug"])


def test_an_index_built_with_bf16_serves_in_bf16_unless_told_otherwise(tmp_path, five_passages, tiny_bert_dir, capsys):
    from retriever_server.retriever import Retriever

    out = tmp_path / "idx"
    assert run_cli(_build(five_passages, tiny_bert_dir, out, "--bf16", "--device", "cpu"), capsys)[0] == 0
    assert json.loads((out / "meta.json").read_text())["encoder"]["bf16"] is True
    assert Retriever.from_index_dir(out).encoder.dtype_name == "bfloat16"
    args = build_parser().parse_args(["serve", "--index", str(out), "--no-bf16"])
    assert args.bf16 is False
    assert Retriever.from_index_dir(out, LoadOptions(bf16=args.bf16)).encoder.dtype_name == "float32"
