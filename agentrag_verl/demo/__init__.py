"""The offline demo on the embedded mini-wiki (``make demo``; ``python -m agentrag_verl.demo [--quick]``).

See :mod:`agentrag_verl.demo.main` for the story; :mod:`~agentrag_verl.demo.pipeline` runs its stages (also for
``benchmarks/learning.py``); :mod:`~agentrag_verl.demo.models` converts SmolLM2 and finds MiniLM;
:mod:`~agentrag_verl.demo.servers` runs the retriever and vLLM servers as child processes;
the stand-in judge is :mod:`agentrag_verl.standin`.
"""
