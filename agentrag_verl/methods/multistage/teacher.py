"""Multi-stage's templates for the scripted stand-in teacher (:mod:`agentrag_verl.warmstart.teacher`): the
structures of §3.3 (Eq. 6), ``<think> (<search> <information> <reflect>)+ <answer>`` with retrieval and
``<think> <reflect> <answer>`` without. After ``</search>`` the environment writes
``\\n\\n<information>{docs}</information>\\n\\n``; each search round closes with the reflection on its passages.
Its queries are keywords (:func:`~agentrag_verl.methods.multistage.reward.keyword_query`): the search reward (Eq. 9)
pays -1 for a single query that is a natural-language question, which the plans' queries are."""

from agentrag_verl.methods.multistage.reward import keyword_query
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
    next_search=f"<reflect>{{fact}} {REASON_NEXT}</reflect>\n<search>{{query}}</search>",
    final="<reflect>{fact}</reflect>\n<answer>{answer}</answer>",
    give_up=f"<reflect>{NOT_FOUND}</reflect>\n<answer>{GIVE_UP_ANSWER}</answer>",
    direct=f"<think>{REASON_DIRECT}</think>\n<reflect>{{fact}}</reflect>\n<answer>{{answer}}</answer>",
    query_style=keyword_query,
)
