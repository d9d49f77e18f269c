"""Read what a ``main_ppo`` run did: per-step metrics and phase times from its stamped log, and whether the
saved actor weights differ from the initial model."""

from __future__ import annotations

import re
from pathlib import Path

_STAMP = re.compile(r"^\[\s*([\d.]+)\] ")
# verl's console logger prints one "step:N - key:value - key:value ..." line per training step.
_STEP_LINE = re.compile(r"step:(\d+) - (.*)$")
# verl's trainers, on loading a checkpoint (trainer.resume_mode): "Setting global step to N" (RayPPOTrainer), "Resuming
# from <dir>, setting global step to N" (the V1 trainer)
_RESUMED_AT = re.compile(r"setting global step to (\d+)", re.IGNORECASE)
_NP_FLOAT = re.compile(r"^np\.float\d*\((.*)\)$")


def parse_metrics(text: str) -> dict[str, float | str]:
    """Parse ``key:value - key:value`` into a dict (floats where they parse).

    >>> parse_metrics("critic/score/mean:0.25 - training/global_step:1 - note:np.float64(0.5)")
    {'critic/score/mean': 0.25, 'training/global_step': 1.0, 'note': 0.5}
    """
    metrics: dict[str, float | str] = {}
    for part in text.split(" - "):
        key, sep, value = part.rpartition(":")
        if not sep or not key.strip():
            continue
        value = _NP_FLOAT.sub(r"\1", value.strip())
        try:
            metrics[key.strip()] = float(value)
        except ValueError:
            metrics[key.strip()] = value
    return metrics


def summarize_log(log_text: str) -> dict:
    """Phase times and training-step metrics of a log written by
    :func:`agentrag_verl.local_cpu.process_tree.run_process_tree`.

    Returns:
        ``{"until_training_starts_s", "step_wall_s": {step: s}, "total_s", "steps": {step: metrics}}``; training
        starts when the initial validation is logged (``val_before_train``) or the first step line appears.
    """
    lines = [(float(m.group(1)), raw[m.end() :]) for raw in log_text.splitlines() if (m := _STAMP.match(raw))]
    t_ready = next((t for t, line in lines if "Initial validation metrics" in line), None)
    steps: dict[int, dict] = {}
    step_wall: dict[int, float] = {}
    previous = t_ready
    for t, line in lines:
        m = _STEP_LINE.search(line)
        if not m or "training/global_step" not in line:
            continue
        step = int(m.group(1))
        steps[step] = parse_metrics(m.group(2))
        if t_ready is None:  # no initial validation: the first step's own timing marks the start
            t_ready = previous = t - float(steps[step].get("timing_s/step", 0.0))
        step_wall[step] = round(t - previous, 1)
        previous = t
    return {
        "until_training_starts_s": t_ready,
        "step_wall_s": step_wall,
        "total_s": lines[-1][0] if lines else None,
        "steps": steps,
    }


def summarize_attempts(log_texts: list[str]) -> dict:
    """:func:`summarize_log` over the logs of one run stopped and resumed, oldest first. Each later attempt resumes
    from a checkpoint (verl logs "setting global step to N"): what the earlier ones logged after step N is dropped,
    having been trained again or not at all. An attempt stopped before it loaded the checkpoint drops nothing.
    ``until_training_starts_s`` is the first attempt's, ``total_s`` the sum over attempts.

    >>> first = "[ 10.0] Initial validation metrics: {}\\n[ 20.0] step:1 - training/global_step:1 - r:0.1\\n"
    >>> first += "[ 30.0] step:2 - training/global_step:2 - r:0.2\\n[ 35.0] step:3 - training/global_step:3 - r:0.9"
    >>> second = "[ 2.0] Setting global step to 1\\n[ 5.0] Initial validation metrics: {}\\n"
    >>> second += "[ 17.0] step:2 - training/global_step:2 - r:0.3"
    >>> stopped_starting = "[ 3.0] starting Ray"
    >>> merged = summarize_attempts([first, stopped_starting, second])
    >>> {k: m["r"] for k, m in merged["steps"].items()}, merged["step_wall_s"], merged["total_s"], merged["attempts"]
    ({1: 0.1, 2: 0.3}, {1: 10.0, 2: 12.0}, 55.0, 3)
    >>> sorted(summarize_attempts([first, stopped_starting])["steps"])
    [1, 2, 3]
    """
    merged: dict = {"until_training_starts_s": None, "step_wall_s": {}, "steps": {}, "total_s": 0.0}
    for i, text in enumerate(log_texts):
        part = summarize_log(text)
        if i == 0:
            merged["until_training_starts_s"] = part["until_training_starts_s"]
        elif resumed := _RESUMED_AT.search(text):  # (an attempt stopped before verl loaded the checkpoint cuts nothing)
            for key in ("steps", "step_wall_s"):
                merged[key] = {step: v for step, v in merged[key].items() if step <= int(resumed.group(1))}
        merged["steps"].update(part["steps"])
        merged["step_wall_s"].update(part["step_wall_s"])
        merged["total_s"] += part["total_s"] or 0.0
    merged["attempts"] = len(log_texts)
    return merged


CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"
"""What verl's trainer writes in ``trainer.default_local_dir`` after a checkpoint is complete: its step."""


def tracked_step(checkpoint_root: Path) -> int | None:
    """The step verl's tracker file under ``checkpoint_root`` names (written once a checkpoint is saved), or None."""
    tracker = Path(checkpoint_root) / CHECKPOINT_TRACKER
    return int(tracker.read_text().strip()) if tracker.is_file() else None


def saved_step(checkpoint_root: Path) -> int | None:
    """The step of the latest complete RL checkpoint under ``checkpoint_root`` (:func:`tracked_step`, written after
    the actor, the critic and the data loader are saved), or None when there is none to resume from."""
    step = tracked_step(checkpoint_root)
    return step if step is not None and (Path(checkpoint_root) / f"global_step_{step}" / "actor").is_dir() else None


def load_actor_state(actor_dir: Path) -> dict:
    """Full actor state dict (CPU tensors) from verl's single-rank FSDP checkpoint in ``actor_dir``."""
    import torch

    shards = sorted(actor_dir.glob("model_world_size_*_rank_*.pt"))
    if len(shards) != 1:
        raise ValueError(f"expected one model_world_size_1_rank_0.pt under {actor_dir}, found {len(shards)}")
    state = torch.load(shards[0], map_location="cpu", weights_only=False)
    return {
        key: value.full_tensor() if hasattr(value, "full_tensor") else value
        for key, value in state.items()
        if hasattr(value, "shape")
    }


def compare_weights(model_dir: Path, actor_dir: Path) -> dict:
    """How the checkpointed actor differs from the initial ``model_dir`` safetensors.

    Returns:
        ``{"tensors_compared", "tensors_changed", "max_abs_diff"}``.
    """
    from safetensors.torch import load_file

    initial: dict = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        initial.update(load_file(str(f)))
    trained = load_actor_state(actor_dir)
    compared = changed = 0
    max_abs = 0.0
    for name, tensor in trained.items():
        ref = initial.get(name)
        if ref is None or ref.shape != tensor.shape:
            continue
        diff = (tensor.float() - ref.float()).abs().max().item()
        compared += 1
        changed += diff > 0
        max_abs = max(max_abs, diff)
    return {"tensors_compared": compared, "tensors_changed": changed, "max_abs_diff": max_abs}
