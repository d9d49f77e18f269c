"""Search-R1's templates for the scripted stand-in teacher (:mod:`agentrag_verl.warmstart.teacher`), also
AutoSearch's (the same tags). After ``</search>`` the environment writes
``\\n\\n<information>{docs}</information>\\n\\n``."""

from agentrag_verl.warmstart.teacher import (
    GIVE_UP_ANSWER,
    NOT_FOUND,
    REASON_DIRECT,
    REASON_FIRST,
    REASON_NEXT,
    TeacherTemplates,
)

TEMPLATES = TeacherTemplates(
    observation_open="<information>",
    observation_close="</information>",
    first_search=f"<think>{REASON_FIRST}</think>\n<search>{{query}}</search>",
    next_search=f"<think>{{fact}} {REASON_NEXT}</think>\n<search>{{query}}</search>",
    final="<think>{fact}</think>\n<answer>{answer}</answer>",
    give_up=f"<think>{NOT_FOUND}</think>\n<answer>{GIVE_UP_ANSWER}</answer>",
    direct=f"<think>{REASON_DIRECT} {{fact}}</think>\n<answer>{{answer}}</answer>",
)
