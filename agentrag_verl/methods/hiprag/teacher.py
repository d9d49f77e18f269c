"""HiPRAG's templates for the scripted stand-in teacher (:mod:`agentrag_verl.warmstart.teacher`): the Figure 4
layout. After ``</search>`` the environment writes ``<context>{docs}</context>\\n<conclusion>``."""

from agentrag_verl.warmstart.teacher import (
    GIVE_UP_ANSWER,
    NOT_FOUND,
    REASON_DIRECT,
    REASON_FIRST,
    REASON_NEXT,
    TeacherTemplates,
)

TEMPLATES = TeacherTemplates(
    observation_open="<context>",
    observation_close="</context>",
    first_search=f"<think>\n<step>\n<reasoning>{REASON_FIRST}</reasoning>\n<search>{{query}}</search>",
    next_search=f"{{fact}}</conclusion>\n</step>\n<step>\n<reasoning>{REASON_NEXT}</reasoning>\n<search>{{query}}</search>",
    final="{fact}</conclusion>\n</step>\n</think>\n<answer>{answer}</answer>",
    give_up=f"{NOT_FOUND}</conclusion>\n</step>\n</think>\n<answer>{GIVE_UP_ANSWER}</answer>",
    direct=(
        f"<think>\n<step>\n<reasoning>{REASON_DIRECT}</reasoning>\n<conclusion>{{fact}}</conclusion>\n</step>\n"
        "</think>\n<answer>{answer}</answer>"
    ),
)
