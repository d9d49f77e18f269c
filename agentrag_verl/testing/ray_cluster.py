"""Throwaway local Ray clusters for tests: 127.0.0.1, no token auth, their own temp dir, a fixed CPU count.

:func:`local_ray` starts Ray inside the test process (``ray.init``); :func:`ray_head` starts a head node with a job
server in its own processes, for Ray job submission (``recipes/ray/submit.sh``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

__all__ = ["local_ray", "ray_head"]


@contextlib.contextmanager
def local_ray(num_cpus: int = 2, num_gpus: int = 0, **init_kwargs) -> Iterator[dict]:
    """Start a local Ray instance for the duration of the block and remove its session files afterwards.

    Ray >= 2.60 enables token auth and writes to ``~/.ray`` by default; tests set ``RAY_AUTH_MODE=disabled``
    and keep sessions in a short temp dir (Ray's unix socket paths must stay under 107 characters).

    Args:
        num_cpus: Logical CPUs the cluster advertises.
        num_gpus: Logical GPUs the cluster advertises (0 on CPU machines).
        **init_kwargs: Extra keyword arguments for ``ray.init``.

    Yields:
        The context ``ray.init`` returned, as a dict (``address``, ``node_id``, ...).
    """
    import ray

    if ray.is_initialized():
        raise RuntimeError(
            "Ray is already initialized in this process; local_ray() starts its own cluster. "
            "Call ray.shutdown() first or reuse the running cluster."
        )
    previous_auth = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    try:
        ctx = ray.init(
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            include_dashboard=False,
            _temp_dir=temp_dir,
            _node_ip_address="127.0.0.1",
            log_to_driver=False,
            **init_kwargs,
        )
        try:
            yield dict(ctx.address_info)
        finally:
            ray.shutdown()
    finally:
        if previous_auth is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = previous_auth
        shutil.rmtree(temp_dir, ignore_errors=True)


@contextlib.contextmanager
def ray_head(num_cpus: int = 2, num_gpus: int = 0, env: dict[str, str] | None = None) -> Iterator[str]:
    """A Ray head node with a job server, as ``ray start --head`` runs it on a cluster, for the block's duration.

    Binds 127.0.0.1 only (GCS and dashboard ports chosen free), no token auth, session files in its own short temp
    dir. The ``ray start --block`` process is stopped at the end (it stops the head's processes); anything of its
    process tree still alive after that is killed by pid, never with ``ray stop`` (which would end every Ray
    instance on the machine).

    Args:
        num_cpus: Logical CPUs the head advertises.
        num_gpus: Logical GPUs the head advertises.
        env: Extra environment of the head's processes (Ray workers inherit it).

    Yields:
        The job server address, ``http://127.0.0.1:<port>`` (``RAY_ADDRESS`` for ``ray job submit``).
    """
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from agentrag_verl.demo.servers import free_port
    from agentrag_verl.local_cpu.process_tree import descendants

    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    gcs_port, dashboard_port = free_port(), free_port()
    ray_cli = str(Path(sys.executable).with_name("ray"))
    cmd = [ray_cli, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={gcs_port}"]
    cmd += [f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}", f"--temp-dir={temp_dir}", "--disable-usage-stats"]
    cmd += ["--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}"]
    full_env = {**os.environ, **(env or {}), "RAY_AUTH_MODE": "disabled"}
    log = open(Path(temp_dir) / "ray_start.log", "wb")  # noqa: SIM115 - closed below
    head = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env)
    address = f"http://127.0.0.1:{dashboard_port}"
    try:
        deadline = time.monotonic() + 180
        while not _job_server_ready(address, full_env):
            if head.poll() is not None or time.monotonic() > deadline:
                tail = (Path(temp_dir) / "ray_start.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the Ray head did not start (exit {head.poll()}): {tail}")
            time.sleep(1.0)
        yield address
    finally:
        tree = descendants(head.pid)
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _job_server_ready(address: str, env: dict[str, str]) -> bool:
    """Whether the head accepts a job: its dashboard answers *and* its job agent has registered (a fresh head
    answers ``/api/version`` seconds before it can run a job: "No available agent to submit job")."""
    import time

    from ray.job_submission import JobStatus, JobSubmissionClient

    try:
        client = JobSubmissionClient(address)
        job = client.submit_job(entrypoint="true", runtime_env={"env_vars": {"RAY_AUTH_MODE": env["RAY_AUTH_MODE"]}})
    except Exception:  # not up yet: connection refused, or the agent has not registered
        return False
    for _ in range(120):  # the probe job ends within seconds
        if client.get_job_status(job) in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            return True
        time.sleep(0.5)
    return True
