"""CPU-only mode for verl 0.9.1: train with ``python -m verl.trainer.main_ppo`` on a host with no accelerator.

Selected by verl's own platform switch, ``VERL_PLATFORM=cpu``: the ``verl.plugins`` entry point
(``agentrag_verl.verl_plugin``) runs at ``import verl`` in every process (driver, Ray workers, vLLM's engine and
worker subprocesses) and calls :func:`activate` only when that variable says ``cpu``; GPU runs never import
this package. :func:`activate`

* registers :class:`~agentrag_verl.local_cpu.platform_cpu.PlatformCPU` as platform ``cpu`` in
  ``verl.plugin.platform.PlatformRegistry`` (device ``cpu``, gloo, Ray resource ``GPU``, no IPC);
* sets ``VERL_ENGINE_DEVICE=cuda`` unless set: verl registers its FSDP engines for devices ``cuda``/``npu`` only
  (``EngineRegistry.get_engine_cls``), and that variable is verl's switch to pick them on another device;
* sets ``VLLM_TARGET_DEVICE=cpu`` unless set, so vLLM picks its CPU platform in every subprocess;
* flushes denormal floats to zero (``torch.set_flush_denormal``), as GPUs do: on x86 they are 10-100x slower;
* installs the runtime patches in :mod:`agentrag_verl.local_cpu.patches` and the ``vllm`` metadata alias in
  :mod:`agentrag_verl.local_cpu.vllm_dist_shim`, and (when asked) the token-reward dump of
  :mod:`agentrag_verl.local_cpu.token_rewards`.

``agentrag-verl train-local`` (:mod:`agentrag_verl.local_cpu.train_local`) runs ``main_ppo`` with the CPU settings;
``recipes/local_cpu/README.md`` documents the recipe, the root causes and the measured cost.
"""

from __future__ import annotations

import os

CPU_PLATFORM = "cpu"

_activated = False


def is_cpu_mode() -> bool:
    """True when verl's platform is forced to the CPU platform (``VERL_PLATFORM=cpu``)."""
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == CPU_PLATFORM


def activate() -> None:
    """Register the CPU platform and install the CPU runtime patches in this process (idempotent)."""
    global _activated
    if _activated:
        return
    os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

    import torch

    # x86 CPUs compute on denormal floats 10-100x slower; fp32 training never needs them (GPUs flush them too).
    torch.set_flush_denormal(True)

    from verl.plugin.platform import platform_manager

    from agentrag_verl.local_cpu import patches, platform_cpu, token_rewards, vllm_dist_shim

    current = platform_manager._current_platform
    if current is not None and current.device_name != "cpu":
        raise RuntimeError(
            f"agentrag_verl.local_cpu: verl already resolved platform {type(current).__name__} before the CPU "
            "platform was registered; activate() must run at `import verl` (verl.plugins entry point)."
        )
    assert platform_manager.PlatformRegistry.get(CPU_PLATFORM) is platform_cpu.PlatformCPU
    patches.install()
    token_rewards.install()
    if "vllm_metadata" in patches.skipped():
        patches.logger.warning("agentrag_verl.local_cpu: patch 'vllm_metadata' skipped (%s)", patches.SKIP_ENV)
    else:
        vllm_dist_shim.install()
    _activated = True
