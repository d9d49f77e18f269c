"""``python -m agentrag_verl.agent_loops``: print the agent-loop YAML of every declared method."""

from agentrag_verl.agent_loops import render_agent_loop_yaml

print(render_agent_loop_yaml(), end="")
