"""Entry point that verl loads at ``import verl`` (group ``verl.plugins``) in every process.

verl imports this module in the driver and in every Ray worker, so whatever must be registered across
processes (reward managers, agent loops, the CPU platform) is registered from here. The module must stay
light: verl swallows plugin import errors at DEBUG level, so a failure here is silent — run
``agentrag-verl doctor`` to see its traceback.
"""


def _activate_local_cpu_mode() -> None:
    """CPU-only training (``VERL_PLATFORM=cpu``): register the CPU platform and runtime patches.

    Nothing is imported unless that variable selects the CPU platform, so GPU runs never see this code.
    """
    import os

    if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
        from agentrag_verl.local_cpu import activate

        activate()


_activate_local_cpu_mode()


def _register_reward_managers_and_agent_loops() -> None:
    """The declared methods' reward managers in verl's reward-loop registry (see
    :mod:`agentrag_verl.rewards.registration`) and their agent loops in verl's agent-loop registry
    (:func:`agentrag_verl.agent_loops.register_in_verl`), each when verl imports that registry's module."""
    from agentrag_verl._post_import import when_imported
    from agentrag_verl.agent_loops import VERL_AGENT_LOOP_MODULE, register_in_verl
    from agentrag_verl.rewards.registration import install

    install()
    when_imported(VERL_AGENT_LOOP_MODULE, register_in_verl)


_register_reward_managers_and_agent_loops()


def package_path(relative: str) -> str:
    """Absolute path of ``relative`` inside the installed ``agentrag_verl`` package.

    The recipes name the agent-loop YAML as ``${agentrag_path:agent_loops/agent_loops.yaml}``: resolved in the
    process that resolves the config, from wherever the package is installed (editable or not), so a Ray worker whose
    working directory is not the repository finds it too (verl resolves a relative path from the working directory,
    else from site-packages only).

    >>> package_path("agent_loops/agent_loops.yaml").endswith("agentrag_verl/agent_loops/agent_loops.yaml")
    True
    """
    import os

    root = os.path.dirname(os.path.abspath(__file__))
    path = os.path.normpath(os.path.join(root, relative))
    if not path.startswith(root + os.sep) or not os.path.exists(path):
        raise FileNotFoundError(f"${{agentrag_path:{relative}}}: no such file in the agentrag_verl package ({root})")
    return path


def _register_config_resolvers() -> None:
    """``${agentrag_path:...}`` (:func:`package_path`) for OmegaConf, in every process that imports verl."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("agentrag_path"):
        OmegaConf.register_new_resolver("agentrag_path", package_path)


_register_config_resolvers()
