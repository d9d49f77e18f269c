"""The offline demo on the embedded mini-wiki (``make demo``; ``python -m agentrag_verl.demo [--quick]``).

See :mod:`agentrag_verl.demo.main` for the steps; :mod:`~agentrag_verl.demo.models` converts SmolLM2 and finds
MiniLM; :mod:`~agentrag_verl.demo.servers` runs the retriever and vLLM servers as child processes.
"""
