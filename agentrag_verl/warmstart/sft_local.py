"""``agentrag-verl sft-local``: verl's own SFT trainer on a CPU-only machine, over our demonstrations.

It runs ``torchrun -m verl.trainer.sft_trainer`` (the trainer the GPU recipe ``recipes/warmstart/`` uses) with
:class:`~agentrag_verl.warmstart.sft_dataset.DemonstrationDataset` as ``data.custom_cls`` and the settings a CPU
needs (the local CPU mode's platform through ``VERL_PLATFORM=cpu``, FSDP2 over gloo, fp32, SDPA attention, no
remove-padding), then exposes the final checkpoint's Hugging Face folder as ``<work-dir>/model`` — the folder that
vLLM, ``agentrag-verl eval`` and ``agentrag-verl train-local --model`` load as it is.

Decision (CPU path): verl's SFT trainer rather than TRL's ``SFTTrainer`` or a hand-written loop, so the CPU and the
GPU warm start are one code path (same dataset class, same FSDP engine, same ``sft_loss``, same checkpoint layout)
and what the laptop proves is what the cluster runs. A rerun with the same work dir resumes from the last
checkpoint (verl's ``resume_mode=auto``); a finished run is reused. A run is finished when its last checkpoint is at
the planned step (:func:`planned_steps`): a trainer that exits 0 short of it is an error, not a model.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = [
    "sft_overrides",
    "choice_weight_overrides",
    "sft_fingerprint",
    "planned_steps",
    "run_sft_local",
    "copy_tokenizer_files",
    "add_parser",
    "SFTSettings",
]


@dataclass
class SFTSettings:
    """One CPU SFT run."""

    model: str
    """HF model folder to start from."""
    train_files: list[str]
    """``demos.jsonl`` files (kept demonstrations are used)."""
    work_dir: str
    """Checkpoints, log, ``model/`` (the result) and ``summary.json``."""
    epochs: int = 2
    batch_size: int = 8
    """Demonstrations per optimizer step (``data.train_batch_size``)."""
    micro_batch_size: int = 4
    """Demonstrations per forward/backward (``data.micro_batch_size_per_gpu``)."""
    lr: float = 5e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.0
    max_length: int = 1024
    """Longest demonstration in tokens (prompt + response); longer ones are refused."""
    seed: int = 1
    extra_overrides: list[str] = field(default_factory=list)
    """More Hydra overrides of ``sft_trainer_engine`` (they win key by key)."""


def sft_overrides(s: SFTSettings, checkpoint_dir: Path) -> list[str]:
    """Hydra overrides of verl's ``sft_trainer_engine`` for a CPU run (each group says why)."""
    from agentrag_verl.local_cpu.train_local import merge_overrides

    fp32 = "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"
    files = "[" + ",".join(str(Path(f).resolve()) for f in s.train_files) + "]"
    ours = [
        f"data.train_files={files}",
        "data.val_files=null",
        "data.custom_cls.path=pkg://agentrag_verl.warmstart.sft_dataset",
        "data.custom_cls.name=DemonstrationDataset",
        f"data.train_batch_size={s.batch_size}",
        f"data.micro_batch_size_per_gpu={s.micro_batch_size}",
        "data.use_dynamic_bsz=false",
        f"data.max_length={s.max_length}",
        "data.pad_mode=no_padding",
        "data.truncation=error",
        "data.num_workers=0",
        f"model.path={Path(s.model).resolve()}",
        # No flash-attn on CPU: SDPA attention, padded (not remove-padding) forward.
        "model.use_remove_padding=false",
        "+model.override_config.attn_implementation=sdpa",
        "model.enable_gradient_checkpointing=false",
        # FSDP1 fails on CPU; FSDP2 over gloo in fp32 (bf16 is slower than fp32 on this CPU).
        "engine.strategy=fsdp2",
        "engine.use_torch_compile=false",
        f"+engine.mixed_precision={fp32}",
        f"optim.lr={s.lr}",
        f"optim.lr_warmup_steps_ratio={s.warmup_ratio}",
        f"optim.weight_decay={s.weight_decay}",
        "optim.lr_scheduler_type=cosine",
        # The result must be loadable by vLLM / transformers: save the Hugging Face folder too.
        "checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        "trainer.device=cpu",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        f"trainer.total_epochs={s.epochs}",
        "trainer.save_freq=after_each_epoch",
        "trainer.test_freq=-1",
        "trainer.logger=[console]",
        "trainer.project_name=agentrag_warmstart",
        "trainer.experiment_name=sft_local",
        f"trainer.seed={s.seed}",
        "trainer.resume_mode=auto",
        "trainer.max_ckpt_to_keep=1",
        f"trainer.default_local_dir={checkpoint_dir}",
    ]
    return merge_overrides(ours, list(s.extra_overrides))


def choice_weight_overrides(weight: int) -> list[str]:
    """The override that counts the choice to search ``weight`` times in the loss
    (:class:`~agentrag_verl.warmstart.sft_dataset.DemonstrationDataset`'s ``choice_weight``); none at 1, so a plain
    run keeps its settings and its fingerprint.

    >>> choice_weight_overrides(1), choice_weight_overrides(30)
    ([], ['++data.choice_weight=30'])
    """
    return [f"++data.choice_weight={weight}"] if weight > 1 else []


def planned_steps(overrides: Sequence[str], n_demos: int) -> tuple[int, int]:
    """(optimizer steps per epoch, steps in all) that verl's SFT trainer runs over ``n_demos`` demonstrations with
    these overrides, on one rank: its train loader drops the last partial batch, and ``trainer.total_training_steps``,
    where set, replaces epochs x steps per epoch.

    >>> planned_steps(["data.train_batch_size=4", "trainer.total_epochs=2"], 118)
    (29, 58)
    """
    from agentrag_verl.local_cpu.train_local import last_int_override

    per_epoch = n_demos // last_int_override(overrides, "data.train_batch_size")
    total = last_int_override(overrides, "trainer.total_training_steps")
    return per_epoch, total or per_epoch * last_int_override(overrides, "trainer.total_epochs")


def _resume_with_whole_epochs(checkpoint_dir: Path, steps_per_epoch: int) -> int | None:
    """Ready a resume from the latest checkpoint; return its step (None: there is none, the run starts at step 1).

    verl 0.9.1's SFT trainer restores its train loader's state with the checkpoint. A checkpoint saved at an epoch's
    end (as ours are: ``save_freq=after_each_epoch``) holds a loader that has yielded the whole epoch, so the
    resumed run's next epoch yields no batch: the trainer exits 0 without training it (seen: a two-epoch warm start
    stopped in epoch 2 "finished" in 23 s with epoch 1's weights). At an epoch's end that state says nothing more than
    where the epoch is, so it is dropped (verl then starts the loader afresh, and ``set_epoch`` reshuffles it for the
    next epoch). A checkpoint inside an epoch keeps its state.
    """
    from agentrag_verl.local_cpu.report import tracked_step

    step = tracked_step(checkpoint_dir)
    if step and step % steps_per_epoch == 0:
        for state in (Path(checkpoint_dir) / f"global_step_{step}").glob("data_*.pt"):
            state.unlink()
    return step


def _final_hf_folder(checkpoint_dir: Path) -> Path | None:
    steps = sorted(checkpoint_dir.glob("global_step_*"), key=lambda p: int(p.name.rsplit("_", 1)[1]))
    for step in reversed(steps):
        hf = step / "huggingface"
        if (hf / "config.json").exists():
            return hf
    return None


def copy_tokenizer_files(source: Path, target: Path) -> None:
    """Copy the tokenizer of the starting model (its chat template and pad/eos settings) next to trained weights,
    so the folder loads in vLLM and transformers as it is."""
    for f in Path(source).iterdir():
        if f.is_file() and f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges", "chat_template")):
            shutil.copy2(f, Path(target) / f.name)


def sft_fingerprint(s: SFTSettings) -> dict:
    """What a finished run depends on: the settings (but the work dir) and the bytes of the demonstration files, so
    new demonstrations written to the same file train a new model instead of reusing the old one."""
    digest = hashlib.sha256()
    for path in s.train_files:
        if Path(path).is_file():  # a missing file is reported by load_demonstrations, with the hint
            digest.update(Path(path).read_bytes())
    return {**{k: v for k, v in asdict(s).items() if k != "work_dir"}, "train_data_sha256": digest.hexdigest()}


def run_sft_local(s: SFTSettings, *, echo: bool = True) -> dict:
    """Run (or resume, or reuse) the CPU SFT; returns the summary written to ``<work-dir>/summary.json``.

    Raises:
        RuntimeError: The trainer failed (the message names the log).
    """
    from agentrag_verl.local_cpu.process_tree import run_process_tree
    from agentrag_verl.local_cpu.report import parse_metrics, tracked_step
    from agentrag_verl.local_cpu.train_local import attempt_logs, cpu_env, hydra_run_dir, start_attempt_log
    from agentrag_verl.warmstart.sft_dataset import load_demonstrations

    work = Path(s.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    model_out = work / "model"
    summary_path = work / "summary.json"
    fingerprint = sft_fingerprint(s)
    checkpoint_dir = work / "checkpoints"
    n_demos = len(load_demonstrations(s.train_files))  # fails here, with the file named, on bad input
    if n_demos < s.batch_size:
        raise ValueError(
            f"only {n_demos} kept demonstrations, fewer than one batch ({s.batch_size}); an epoch would have no step. "
            "Lower --batch-size or generate more demonstrations."
        )
    overrides = sft_overrides(s, checkpoint_dir)
    per_epoch, total = planned_steps(overrides, n_demos)
    if summary_path.exists() and (model_out / "config.json").exists():
        previous = json.loads(summary_path.read_text())
        if (
            previous.get("settings") == fingerprint
            and previous.get("returncode") == 0
            and tracked_step(checkpoint_dir) in (None, total)  # None: the checkpoints were removed after the run
        ):
            return previous
    run_file = work / "run.json"
    if run_file.exists() and json.loads(run_file.read_text()) != fingerprint:
        # verl resumes from the latest checkpoint in the folder (resume_mode=auto): never from another run's.
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
    run_file.write_text(json.dumps(fingerprint, indent=1))
    resumed = _resume_with_whole_epochs(checkpoint_dir, per_epoch)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
           "-m", "verl.trainer.sft_trainer", hydra_run_dir(work), *overrides]  # fmt: skip
    env = cpu_env()
    log_path = work / "sft.log"
    start_attempt_log(work, resumed=resumed is not None, name=log_path.name)
    if echo:
        print("agentrag-verl sft-local:", " ".join(cmd), flush=True)
    result = run_process_tree(cmd, env, log_path, echo=sys.stdout if echo else None)
    text = "\n".join(p.read_text(errors="replace") for p in attempt_logs(work, log_path.name))
    steps = {}
    for line in text.splitlines():  # every attempt's steps; one trained again after a resume: its last figures
        if "step:" in line and "train/loss" in line:
            metrics = parse_metrics(line[line.index("step:") :].split(" - ", 1)[-1])
            step = int(line[line.index("step:") + 5 :].split(" ", 1)[0])
            steps[step] = {k: v for k, v in metrics.items() if k.startswith("train/")}
    summary = {
        "settings": fingerprint,
        "demonstrations": n_demos,
        "returncode": result.returncode,
        "wall_s": round(result.wall_s, 1),
        "memory": result.memory.as_gib(),
        "steps": steps,
        "log": str(log_path),
    }
    hf, saved = _final_hf_folder(checkpoint_dir), tracked_step(checkpoint_dir)
    failure = None
    if result.returncode != 0 or hf is None:
        failure = (
            f"verl's SFT trainer failed (exit {result.returncode}{'' if hf else ', no Hugging Face checkpoint'}); "
            f"see {log_path}"
        )
    elif saved != total:
        failure = (
            f"verl's SFT trainer exited 0, but its last checkpoint is at step {saved} of the {total} planned "
            f"({per_epoch} an epoch); its weights would be a model short of training. See {log_path}; run the same "
            f"command again to continue from that checkpoint, or remove {checkpoint_dir} to start over."
        )
    if failure:
        summary_path.write_text(json.dumps(summary, indent=1))
        raise RuntimeError(failure)
    shutil.rmtree(model_out, ignore_errors=True)
    shutil.copytree(hf, model_out)
    copy_tokenizer_files(Path(s.model), model_out)
    summary["model"] = str(model_out)
    summary_path.write_text(json.dumps(summary, indent=1))
    return summary


def run(args: argparse.Namespace) -> int:
    s = SFTSettings(
        model=args.model,
        train_files=list(args.demos),
        work_dir=args.work_dir,
        epochs=args.epochs,
        batch_size=args.batch_size,
        micro_batch_size=args.micro_batch_size,
        lr=args.lr,
        max_length=args.max_length,
        extra_overrides=[*choice_weight_overrides(args.choice_weight), *(o for o in args.overrides if o != "--")],
    )
    from agentrag_verl.cli_common import input_dir, output_dir, report_error

    try:
        input_dir(args.model, "--model")
        output_dir(args.work_dir, "--work-dir")
        if not (Path(args.model) / "config.json").is_file():
            raise ValueError(f"--model {args.model}: no config.json; pass a Hugging Face model folder")
        summary = run_sft_local(s, echo=not args.quiet)
    except (RuntimeError, ValueError, OSError) as e:
        return report_error("agentrag-verl sft-local", e, code=1)
    losses = [m.get("train/loss") for _, m in sorted(summary["steps"].items())]
    print(f"SFT: {summary['demonstrations']} demonstrations, {len(losses)} steps, wall {summary['wall_s']} s")
    if losses:
        print(f"loss first {losses[0]:.4f} -> last {losses[-1]:.4f}")
    print(f"model: {summary['model']}")
    return 0


def add_parser(subparsers) -> None:
    from agentrag_verl.cli_common import positive_int

    p = subparsers.add_parser(
        "sft-local",
        help="Warm-start a policy on demonstrations with verl's SFT trainer on this CPU-only machine.",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--model", required=True, help="HF model folder to fine-tune.")
    p.add_argument("--demos", required=True, nargs="+", help="demos.jsonl file(s) from `agentrag-verl demos generate`.")
    p.add_argument("--work-dir", default="outputs/sft_local", help="Checkpoints, log, model/ and summary.json.")
    p.add_argument("--epochs", type=positive_int, default=2)
    p.add_argument("--batch-size", type=positive_int, default=8, help="Demonstrations per optimizer step.")
    p.add_argument("--micro-batch-size", type=positive_int, default=4, help="Demonstrations per forward/backward.")
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument(
        "--max-length", type=positive_int, default=1024, help="Longest demonstration (prompt + response) in tokens."
    )
    p.add_argument(
        "--choice-weight",
        type=positive_int,
        default=1,
        help="Count the tokens of each demonstration's choice to search (its direct or searching opening) this many "
        "times in the loss (docs/warmstart.md, section 2).",
    )
    p.add_argument("--quiet", action="store_true", help="Write the trainer's output only to the log file.")
    p.add_argument("overrides", nargs=argparse.REMAINDER, help="Hydra overrides for verl's sft_trainer (after --).")
    p.set_defaults(func=run)
