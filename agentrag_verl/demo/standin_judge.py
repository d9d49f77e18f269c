"""A rule-based **stand-in for the papers' LLM judges**, served as an OpenAI-compatible chat endpoint on 127.0.0.1.

The papers judge with GPT-4.1-mini / GPT-5-mini. A laptop has neither, and a 135M model's verdicts are noise, so
the demo and the learning benchmark point the judge client (the real one, over HTTP) at this server. It answers
two of the papers' prompts, by rules a reader can check:

- HiPRAG Figure 5 (over-search: are the step's conclusion and the policy's standalone re-answer "semantically
  equivalent"?): **True** when at least ``coverage`` (0.8) of the content words of the shorter statement occur in
  the other one, after SQuAD normalization, without stopwords and with a final "s" dropped. "The capital of
  Italy is Rome." and "Rome is the capital city of Italy." are equivalent; "... is Milan." is not.
- The multi-stage paper's B.4 correctness judge (YES/NO: does the prediction match a reference?): **YES** when a
  normalized reference occurs in the normalized prediction or the reverse.

It refuses HiPRAG's Figure 6 under-search verifier (HTTP 400): checking a non-search step's facts needs world
knowledge that rules do not have. Runs that use this server therefore train HiPRAG's **"over-search only"**
ablation (``under_search_detector: false``; HiPRAG §5 ablations: non-search steps count as optimal).

Run: ``python -m agentrag_verl.demo.standin_judge --port 8002`` (then ``judge.base_url=http://127.0.0.1:8002/v1``,
``judge.api_key_env=null``).
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentrag_verl.judges.prompts import ANSWER_SEPARATOR
from agentrag_verl.metrics import normalize_answer
from agentrag_verl.registry import method_module

__all__ = ["equivalent", "verdict", "StandInJudge", "MODEL_NAME"]

MODEL_NAME = "standin-judge"

_STOPWORDS = frozenset(
    "a an the of in on at to for by with from and or is are was were be been it its this that which who whom what "
    "when where how as into about than city town".split()
)


def _content_words(text: str) -> set[str]:
    """Normalized words without stopwords, a final "s" dropped ("Italy's" and "Italy", "metres" and "metre" match)."""
    words = (w for w in normalize_answer(text).split() if w not in _STOPWORDS)
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in words}


def equivalent(statement: str, other: str, coverage: float = 0.8) -> bool:
    """Over-search rule (module docstring).

    >>> equivalent("The capital of Italy is Rome.", "Rome is the capital city of Italy.")
    True
    >>> equivalent("The capital of Italy is Rome.", "The capital of Italy is Milan.")
    False
    """
    a, b = _content_words(statement), _content_words(other)
    if not a or not b:
        return False
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    return len(short & long_) / len(short) >= coverage


_STATEMENTS = re.compile(r"Statement 1:(.*)\nStatement 2:(.*)", re.S)
_PREDICTION = re.compile(r"Prediction:\s*(.*?)\s*(?:\n|$)", re.I)
_REFERENCES = re.compile(r"Reference answers?:\s*(.*?)\s*(?:\n|$)", re.I)


def verdict(messages: list[dict[str, Any]]) -> str:
    """The reply text for a judge request.

    Raises:
        ValueError: The request is not one of the prompts this stand-in answers (message says which it is).
    """
    hiprag = method_module("hiprag", "judge")  # the prompts are HiPRAG's own (Figures 5-6)
    system = next((m.get("content", "") for m in messages if m.get("role") == "system"), "")
    user = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "user")
    if system == hiprag.OVER_SEARCH_SYSTEM:
        m = _STATEMENTS.search(user)
        if not m:
            raise ValueError("over-search request without 'Statement 1: ...\\nStatement 2: ...'")
        return f"<answer>{equivalent(m.group(1), m.group(2))}</answer>"
    if system == hiprag.UNDER_SEARCH_SYSTEM:
        raise ValueError(
            "this stand-in judge does not verify facts (HiPRAG Figure 6 needs world knowledge); set "
            "reward.reward_kwargs.under_search_detector=false (the 'over-search only' ablation)"
        )
    pred, refs = _PREDICTION.search(user), _REFERENCES.search(user)
    if pred and refs:
        p = normalize_answer(pred.group(1))
        golds = [normalize_answer(g) for g in refs.group(1).split(ANSWER_SEPARATOR.strip())]
        return "YES" if any(g and (g in p or (p and p in g)) for g in golds) else "NO"
    raise ValueError("unknown judge prompt: this stand-in answers HiPRAG Figure 5 and the multi-stage B.4 judge only")


class _Handler(BaseHTTPRequestHandler):
    server_version = "standin-judge"

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
            self._send(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]})
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
                "model": MODEL_NAME,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1},
            },
        )


class StandInJudge:
    """The server in a background thread (``with StandInJudge() as j: j.base_url``)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.httpd = ThreadingHTTPServer((host, port), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.requests = 0  # type: ignore[attr-defined]
        self.httpd.lock = threading.Lock()  # type: ignore[attr-defined]
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
    p = argparse.ArgumentParser(prog="python -m agentrag_verl.demo.standin_judge", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8002)
    args = p.parse_args(argv)
    if not 0 < args.port < 65536:
        p.error(f"--port {args.port}: a TCP port is 1-65535")
    httpd = ThreadingHTTPServer((args.host, args.port), _Handler)
    httpd.requests = 0  # type: ignore[attr-defined]
    httpd.lock = threading.Lock()  # type: ignore[attr-defined]
    print(f"stand-in judge on http://{args.host}:{args.port}/v1 (model {MODEL_NAME})", flush=True)
    httpd.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
