"""Search-P1's templates for the scripted stand-in teacher (:mod:`agentrag_verl.warmstart.teacher`): Algorithm 2's
layout. The environment writes ``<reasoning>`` before the first generation (so every template that opens a turn
continues a reasoning block the environment opened, or opens the next one) and
``\\n<tool_response>\\n{docs}\\n</tool_response>\\n`` after ``</tool_call>``. The first reasoning is the plan
Figure 7 asks for; the query is the tool call's plain text (the grammar also reads Qwen's JSON tool calls).

A common-knowledge question is answered without a tool call: well-formed (``ValidFormat`` and an answer, the
format compliance of Table 6), though Algorithm 3 pays a trajectory without a tool call nothing (format level
INVALID), so RL with Search-P1's reward learns to search on every question."""

from agentrag_verl.warmstart.teacher import (
    GIVE_UP_ANSWER,
    NOT_FOUND,
    REASON_DIRECT,
    REASON_FIRST,
    REASON_NEXT,
    TeacherTemplates,
)

TEMPLATES = TeacherTemplates(
    observation_open="<tool_response>",
    observation_close="</tool_response>",
    first_search=f"{REASON_FIRST} First I find: {{query}}</reasoning>\n<tool_call>{{query}}</tool_call>",
    next_search=f"<reasoning>{{fact}} {REASON_NEXT}</reasoning>\n<tool_call>{{query}}</tool_call>",
    final="<reasoning>{fact}</reasoning>\n<answer>{answer}</answer>",
    give_up=f"<reasoning>{NOT_FOUND}</reasoning>\n<answer>{GIVE_UP_ANSWER}</answer>",
    direct=f"{REASON_DIRECT} {{fact}}</reasoning>\n<answer>{{answer}}</answer>",
)
