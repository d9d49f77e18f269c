"""Run a Ray/vLLM job as a child process: timestamped log, memory of the whole process tree, full cleanup.

``main_ppo`` starts Ray's gcs/raylet, ~10 Ray actors and vLLM's engine/worker subprocesses. ``/usr/bin/time``
sees only the driver, and when the driver exits Ray leaves processes and ``/dev/shm`` segments behind. Here the
calling process becomes a *child subreaper* (``PR_SET_CHILD_SUBREAPER``), so everything the job orphans is
re-parented to it; afterwards every process still left in its tree (except those that were already running
before the job, such as the caller's own servers, and their children) is terminated by pid (never
``ray stop --force``, which would also kill other users' Ray processes) and the shared-memory segments the run
created and nobody maps any more are unlinked.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

_PR_SET_CHILD_SUBREAPER = 36
_SHM = Path("/dev/shm")
# Segments vLLM (multiprocessing.shared_memory "psm_*", semaphores "sem.mp-*") and verl ("verl_weights_*")
# unlink only on a clean shutdown; Ray ends actors with SIGKILL, so every run leaves them behind.
_SHM_PREFIXES = ("psm_", "sem.mp-", "verl_weights_")
GIB = 1 << 30


def meminfo() -> dict[str, int]:
    """``/proc/meminfo`` in bytes."""
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            out[key] = int(value.split()[0]) * 1024
    return out


def descendants(root: int) -> list[int]:
    """Pids of ``root``'s live descendants (not ``root`` itself), from the ppid field of ``/proc/PID/stat``."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _proc_pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@dataclass
class MemoryPeak:
    """Peaks seen while sampling (bytes).

    Attributes:
        host_used_delta: Rise of host used memory (MemTotal - MemAvailable) over the baseline; counts every
            process and ``/dev/shm``, but also anything else running on the host.
        tree_pss: Proportional set size summed over the job's process tree (shared pages counted once).
        num_procs: Processes in the tree.
    """

    host_used_delta: int = 0
    tree_pss: int = 0
    num_procs: int = 0

    def as_gib(self) -> dict[str, float]:
        return {
            "peak_host_used_delta_gib": round(self.host_used_delta / GIB, 2),
            "peak_tree_pss_gib": round(self.tree_pss / GIB, 2),
            "peak_num_procs": self.num_procs,
        }


class _MemorySampler(threading.Thread):
    """Samples host memory every ``interval_s`` and the tree's PSS at most ``max_duty`` of this thread's CPU time.

    PSS comes from ``/proc/PID/smaps_rollup``, which walks the process's page tables: the more memory a process
    holds, the longer a read. Read every second, it took 0.3-0.9 of a core while a SmolLM2 actor updated, a core the
    update needed on a 2-core box. The next PSS sample waits until the last one's CPU time is at most ``max_duty`` of
    the time since it began, so a short spike of PSS can be missed; ``host_used_delta`` (``/proc/meminfo``, cheap)
    is still read every ``interval_s``.
    """

    def __init__(self, interval_s: float, max_duty: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.interval_s, self.max_duty = interval_s, max_duty
        self.peak = MemoryPeak()
        self._stop_event = threading.Event()
        info = meminfo()
        self._baseline = info["MemTotal"] - info["MemAvailable"]

    def run(self) -> None:
        me = os.getpid()
        next_pss = 0.0
        while not self._stop_event.wait(self.interval_s):
            info = meminfo()
            peak = self.peak
            peak.host_used_delta = max(peak.host_used_delta, info["MemTotal"] - info["MemAvailable"] - self._baseline)
            if time.monotonic() < next_pss:
                continue
            began, cpu = time.monotonic(), time.thread_time()
            pids = descendants(me)
            peak.tree_pss = max(peak.tree_pss, sum(_proc_pss(pid) for pid in pids))
            peak.num_procs = max(peak.num_procs, len(pids))
            next_pss = began + (time.thread_time() - cpu) / self.max_duty

    def stop(self) -> MemoryPeak:
        self._stop_event.set()
        self.join()
        return self.peak


def _shm_names() -> set[str]:
    try:
        return {p.name for p in _SHM.iterdir()}
    except OSError:
        return set()


def _mapped_shm() -> set[str]:
    names = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/maps") as f:
                names.update(line.rsplit("/dev/shm/", 1)[1].split()[0] for line in f if "/dev/shm/" in line)
        except OSError:
            continue
    return names


def _leftovers(spare: set[int]) -> list[int]:
    """Our descendants, except the processes in ``spare`` (they were running before the job) and their own
    descendants: a caller's servers (the demo's retriever, a test's fixtures) outlive the job they served."""
    protected = set(spare)
    for pid in spare:
        protected.update(descendants(pid))
    return [pid for pid in descendants(os.getpid()) if pid not in protected]


def _terminate_tree(grace_s: float, log: TextIO, spare: set[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = _leftovers(spare)
        if not left:
            return
        print(f"[cleanup] {sig.name} to {len(left)} leftover processes", file=log, flush=True)
        for pid in left:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            try:
                while os.waitpid(-1, os.WNOHANG)[0] > 0:  # reap re-parented orphans
                    pass
            except ChildProcessError:
                pass
            if not _leftovers(spare):
                return
            time.sleep(0.2)


@dataclass
class RunResult:
    returncode: int
    wall_s: float
    memory: MemoryPeak
    aborted: str | None = None
    """Why the run was stopped (``abort_on``), None when it ended by itself."""


def run_process_tree(
    cmd: list[str],
    env: dict[str, str],
    log_path: Path,
    *,
    echo: TextIO | None = sys.stdout,
    grace_s: float = 10.0,
    abort_on: Mapping[str, str] | None = None,
) -> RunResult:
    """Run ``cmd``, copy its output with ``[seconds]`` stamps to ``log_path`` (and ``echo``), then clean up.

    Args:
        cmd: The command line.
        env: Its environment.
        log_path: Where the stamped stdout+stderr go.
        echo: Also write the stamped lines here (None: log file only).
        grace_s: Seconds to wait after SIGTERM before SIGKILL for leftover processes.
        abort_on: Output that means the job cannot finish (text to look for in a line -> why): the first line
            that holds one stops the job (the cleanup's SIGTERM, then SIGKILL) and the reason goes to the log,
            ``echo`` and :attr:`RunResult.aborted`.

    Returns:
        Exit code (1 when aborted), wall time and the memory peaks of the whole process tree.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed; run_process_tree needs Linux")
    shm_before = _shm_names()
    spare = set(descendants(os.getpid()))
    sampler = _MemorySampler(interval_s=1.0)
    sampler.start()
    start = time.monotonic()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log:
        child = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        if threading.current_thread() is threading.main_thread():
            for sig in previous:
                signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
        aborted = None
        try:
            for line in child.stdout:
                stamped = f"[{time.monotonic() - start:7.1f}] {line}"
                aborted = next((why for text, why in (abort_on or {}).items() if text in line), None)
                if aborted:
                    stamped += f"[abort] {aborted}\n"
                log.write(stamped)
                log.flush()  # the log is what a user tails while a long run goes on
                if echo is not None:
                    echo.write(stamped)
                    echo.flush()
                if aborted:  # its descendants may hold the pipe open: stop reading; _terminate_tree ends the job
                    break
            returncode = 1 if aborted else child.wait()
        finally:
            if threading.current_thread() is threading.main_thread():
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
            wall_s = time.monotonic() - start
            memory = sampler.stop()
            _terminate_tree(grace_s, log, spare)
            leftover = {n for n in _shm_names() - shm_before if n.startswith(_SHM_PREFIXES)} - _mapped_shm()
            for name in leftover:
                (_SHM / name).unlink(missing_ok=True)
            if leftover:
                print(f"[cleanup] removed {len(leftover)} leftover /dev/shm segments", file=log)
    return RunResult(returncode=returncode, wall_s=wall_s, memory=memory, aborted=aborted)
