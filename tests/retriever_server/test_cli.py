"""``python -m retriever_server``: Search-R1 flag aliases, the query subcommand, serving Search-R1's files."""

from __future__ import annotations

import json

from retriever_server.cli import build_parser, main
from retriever_server.ray_app import IndexSource, load_source
from retriever_server.retriever import LoadOptions


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
    assert loaded.retrieve(question, 3) == retriever.retrieve(question, 3)
