"""The **stand-in judge**: an OpenAI-compatible chat endpoint on 127.0.0.1 that answers the papers' judge prompts by
rules a reader can check. It is a stand-in for the papers' LLM judges (GPT-4.1-mini / GPT-5-mini), not a model.

The demo, the learning benchmark and the recipes' local profile (``PROFILE=local``) point the real judge client,
over real HTTP, at this server: a laptop has no judge model, and a 135M model's verdicts are noise. Each method
declares its own rules (:attr:`agentrag_verl.registry.Method.standin`: ``reply(system, user) -> text or None``, in
its folder's ``standin.py``); a request goes to the first method whose rule answers it. A prompt no rule answers,
or a rule's refusal, is an HTTP 400 that says so, never a made-up verdict.

Some rules need the toy world's knowledge, as the papers' judges use their own (HiPRAG's under-search verifier,
Figure 6: is a step answered without a search factually right?). The stand-in's world is a corpus: by default the
mini-wiki's (``examples/mini_wiki/corpus.jsonl``) plus its common-knowledge answer table (every common-knowledge
question of ``common/{train,test}.jsonl`` with its answer: most of them have no passage, and the papers' judges know
such facts), or ``--world FILE`` (:func:`world_passages`).

Run: ``python -m agentrag_verl.standin --port 8002`` (then ``judge.base_url=http://127.0.0.1:8002/v1``,
``judge.api_key_env=null``); in-process: ``with StandInJudge() as judge: judge.base_url``.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = [
    "verdict",
    "rules",
    "StandInJudge",
    "MODEL_NAME",
    "main",
    "set_world",
    "world_passages",
    "common_answer_table",
]

MODEL_NAME = "standin-judge"

_world: dict[str, Any] = {"path": None, "passages": None}
_world_lock = threading.Lock()


def set_world(corpus: str | os.PathLike[str] | None) -> None:
    """Use the passages of ``corpus`` (a Search-R1 / FlashRAG corpus JSONL, ``contents`` per line) as the stand-in's
    world knowledge; None: the mini-wiki's. Read on first use.

    Raises:
        FileNotFoundError: No such file.
    """
    if corpus is not None and not Path(corpus).is_file():
        raise FileNotFoundError(f"stand-in world {corpus}: no such corpus file (a JSONL with 'contents' per line)")
    with _world_lock:
        _world.update(path=None if corpus is None else Path(corpus), passages=None)


def world_passages() -> list[str]:
    """The passages of the stand-in's world (:func:`set_world`), read once: the given corpus, or the mini-wiki's
    corpus and its common-knowledge answer table (:func:`common_answer_table`)."""
    with _world_lock:
        if _world["passages"] is None:
            from agentrag_verl.eval.data import MINI_WIKI_DIR

            path = _world["path"] or MINI_WIKI_DIR / "corpus.jsonl"
            with open(path, encoding="utf-8") as f:
                passages = [json.loads(line)["contents"] for line in f if line.strip()]
            _world["passages"] = passages if _world["path"] else passages + common_answer_table(MINI_WIKI_DIR)
        return _world["passages"]


def common_answer_table(data_dir: str | os.PathLike[str]) -> list[str]:
    """One line per common-knowledge question of a mini-wiki folder (``common/{train,test}.jsonl``): its stated
    ``fact`` where the row has one, else the question and its answers (``"What is the capital of Chile? Santiago"``).

    >>> from agentrag_verl.eval.data import MINI_WIKI_DIR
    >>> table = common_answer_table(MINI_WIKI_DIR)
    >>> "What is the capital of Chile? Santiago" in table, "The capital of Italy is Rome." in table
    (True, True)
    """
    lines = []
    for split in ("train", "test"):
        path = Path(data_dir) / "common" / f"{split}.jsonl"
        if path.is_file():
            for row in map(json.loads, path.read_text(encoding="utf-8").splitlines()):
                fact = (row.get("metadata") or {}).get("fact")
                lines.append(fact or f"{row['question']} {' / '.join(row['golden_answers'])}")
    return lines


Rule = Callable[[str, str], "str | None"]


def rules() -> dict[str, Rule]:
    """``{method: reply}`` of every method that declares stand-in rules, in method order."""
    from agentrag_verl.registry import methods

    return {m.name: m.load("standin") for m in methods() if m.standin}


def verdict(messages: list[dict[str, Any]]) -> str:
    """The reply text for a judge request (chat messages).

    Raises:
        ValueError: No method's rule answers this prompt, or the rule refuses it (the message says why).
    """
    system = next((str(m.get("content", "")) for m in messages if m.get("role") == "system"), "")
    user = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "user")
    declared = rules()
    for rule in declared.values():
        text = rule(system, user)
        if text is not None:
            return text
    raise ValueError(
        f"unknown judge prompt: this stand-in answers the judge prompts of {sorted(declared)} by rule only "
        "(each method's standin.py)"
    )


class _Handler(BaseHTTPRequestHandler):
    server_version = MODEL_NAME

    def log_message(self, format: str, *args: Any) -> None:  # quiet: one line per request would flood the log
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path.rstrip("/").endswith("/models"):
            model = self.server.model  # type: ignore[attr-defined]
            self._send(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
        elif self.path.rstrip("/").endswith("/health"):
            self._send(200, {"status": "ok", "requests": self.server.requests})  # type: ignore[attr-defined]
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:  # noqa: N802
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}; POST /v1/chat/completions"}})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if length > 1 << 20:
                raise ValueError("request body over 1 MiB")
            body = json.loads(self.rfile.read(length) or b"{}")
            text = verdict(list(body.get("messages") or []))
        except (ValueError, TypeError, AttributeError) as e:
            self._send(400, {"error": {"message": str(e), "type": "invalid_request_error"}})
            return
        with self.server.lock:  # type: ignore[attr-defined]
            self.server.requests += 1  # type: ignore[attr-defined]
        self._send(
            200,
            {
                "id": f"standin-{time.monotonic_ns()}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.server.model,  # type: ignore[attr-defined]
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1},
            },
        )


class StandInJudge:
    """The server (``with StandInJudge() as j: j.base_url`` runs it in a background thread)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        model: str = MODEL_NAME,
        world: str | os.PathLike[str] | None = None,
    ) -> None:
        set_world(world)
        self.httpd = ThreadingHTTPServer((host, port), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.requests = 0  # type: ignore[attr-defined]
        self.httpd.lock = threading.Lock()  # type: ignore[attr-defined]
        self.httpd.model = model  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> StandInJudge:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agentrag_verl.standin", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8002)
    p.add_argument("--model", default=MODEL_NAME, help="The model name GET /v1/models lists.")
    p.add_argument("--world", help="Corpus JSONL of the world knowledge rules consult (default: the mini-wiki's).")
    args = p.parse_args(argv)
    if not 0 < args.port < 65536:
        p.error(f"--port {args.port}: a TCP port is 1-65535")
    if args.world and not Path(args.world).is_file():
        p.error(f"--world {args.world}: no such corpus file (a JSONL with 'contents' per line)")
    judge = StandInJudge(args.host, args.port, model=args.model, world=args.world)
    print(f"stand-in judge (rules, not a model) on {judge.base_url} (model {args.model})", flush=True)
    judge.httpd.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
