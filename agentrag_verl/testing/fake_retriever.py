"""A scripted Search-R1 wire-format retriever on 127.0.0.1 for tests (stdlib only, one thread).

Answers ``POST /retrieve`` by keyword overlap over a small passage list, and can be told to fail
(:attr:`FakeRetriever.mode`): ``"ok"``, ``"down"`` (HTTP 503), ``"slow"`` (sleeps ``delay_s`` first),
``"bad_request"`` (HTTP 422) or ``"garbage"`` (HTTP 200 with a non-JSON body). Every request is recorded.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeRetriever"]

_WORD = re.compile(r"\w+")


class FakeRetriever:
    """Context manager running the scripted retriever.

    Args:
        passages: ``{"id", "contents"}`` documents (``contents`` = ``"Title"\\ntext``, wiki-18 layout).

    Attributes:
        url: The ``/retrieve`` URL.
        mode: Failure mode (see the module docstring); change it at any time.
        delay_s: Sleep of the ``"slow"`` mode.
        requests: Every decoded request body, in order.
    """

    def __init__(self, passages: Sequence[dict[str, Any]]) -> None:
        self.passages = list(passages)
        self.mode = "ok"
        self.delay_s = 2.0
        self.requests: list[dict[str, Any]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def search(self, query: str, topk: int) -> list[dict[str, Any]]:
        """Top-``topk`` passages by shared-word count (ties keep corpus order), with the count as score."""
        words = set(_WORD.findall(query.lower()))
        scored = [(len(words & set(_WORD.findall(p["contents"].lower()))), i, p) for i, p in enumerate(self.passages)]
        scored.sort(key=lambda x: (-x[0], x[1]))
        return [{"document": p, "score": float(s)} for s, _, p in scored[:topk]]

    def __enter__(self) -> FakeRetriever:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_POST(self) -> None:  # noqa: N802 (stdlib naming)
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = {}
                outer.requests.append(body)
                mode = outer.mode
                if mode == "slow":
                    time.sleep(outer.delay_s)
                if mode == "down":
                    return self._send(503, b'{"detail": "index not loaded"}')
                if mode == "bad_request":
                    return self._send(422, b'{"detail": "queries must be a list of strings"}')
                if mode == "garbage":
                    return self._send(200, b"<html>oops</html>", "text/html")
                queries = body.get("queries") or ([body["query"]] if "query" in body else [])
                topk = int(body.get("topk") or 3)
                result = [outer.search(str(q), topk) for q in queries]
                if not body.get("return_scores", False):
                    result = [[h["document"] for h in hits] for hits in result]
                self._send(200, json.dumps({"result": result}).encode())

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        assert self._server is not None, "start the retriever with `with FakeRetriever(...) as r:`"
        return f"http://127.0.0.1:{self._server.server_address[1]}/retrieve"

    def __exit__(self, *exc: Any) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
