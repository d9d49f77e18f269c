"""run_process_tree on real child processes: the stamped log, and the stop on output that means the job cannot
finish (train-local's: Ray's memory monitor killed workers, after which verl waits forever)."""

from __future__ import annotations

import os
import sys
import textwrap
import time

from agentrag_verl.local_cpu.process_tree import run_process_tree
from agentrag_verl.local_cpu.train_local import ABORT_ON, RAY_OOM_KILL

# A job like main_ppo after an OOM kill: a descendant holds the output pipe, the raylet's report is printed, and
# nothing ever ends by itself.
HUNG_JOB = textwrap.dedent(
    f"""
    import subprocess, sys, time
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    print("helper", helper.pid, flush=True)
    print("step:1 - critic/vf_loss:0.5", flush=True)
    print("(raylet) node_manager.cc:3517: 4 Workers (tasks / actors) {RAY_OOM_KILL}, 0 Workers crashed", flush=True)
    time.sleep(120)
    """
)


def test_a_finished_job_is_logged_with_stamps(tmp_path):
    log = tmp_path / "job.log"
    result = run_process_tree([sys.executable, "-c", "print('one'); print('two')"], dict(os.environ), log, echo=None)
    assert result.returncode == 0 and result.aborted is None
    lines = log.read_text().splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == ["one", "two"] and lines[0].startswith("[")


def test_a_ray_oom_kill_stops_the_job_instead_of_hanging(tmp_path):
    log = tmp_path / "main_ppo.log"
    start = time.monotonic()
    result = run_process_tree(
        [sys.executable, "-c", HUNG_JOB], dict(os.environ), log, echo=None, grace_s=2.0, abort_on=ABORT_ON
    )
    assert time.monotonic() - start < 60  # the job and its helper would sleep 120 s
    assert result.returncode == 1 and result.aborted == ABORT_ON[RAY_OOM_KILL]
    text = log.read_text()
    assert f"[abort] {ABORT_ON[RAY_OOM_KILL]}" in text and "micro" in result.aborted
    assert text.index("step:1") < text.index("[abort]")  # what came before is kept
    helper = int(text.split("helper ", 1)[1].split()[0])
    assert not os.path.exists(f"/proc/{helper}") or "Z" in open(f"/proc/{helper}/stat").read().split(")")[1][:3]


def test_the_memory_sampler_reads_pss_at_most_its_share_of_cpu(monkeypatch):
    """PSS (smaps_rollup) of a process holding gigabytes costs a large share of a core per read: the next read
    waits until the last one's CPU time is max_duty of the time since it began; host memory is still read every
    interval."""
    from agentrag_verl.local_cpu import process_tree as pt

    reads, host_reads, real_meminfo = [], [], pt.meminfo

    def costly_pss(pid):  # 0.2 s of CPU per read
        reads.append(pid)
        began = time.thread_time()
        while time.thread_time() - began < 0.2:
            pass
        return 1 << 30

    monkeypatch.setattr(pt, "_proc_pss", costly_pss)
    monkeypatch.setattr(pt, "descendants", lambda root: [4242])
    monkeypatch.setattr(pt, "meminfo", lambda: host_reads.append(1) or real_meminfo())
    sampler = pt._MemorySampler(interval_s=0.01, max_duty=0.05)
    sampler.start()
    time.sleep(1.5)
    peak = sampler.stop()
    assert reads == [4242]  # the next read waits 0.2 / 0.05 = 4 s
    assert peak.tree_pss == 1 << 30 and peak.num_procs == 1
    assert len(host_reads) > 10
