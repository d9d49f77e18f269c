"""Multi-stage's templates for the scripted stand-in teacher (:mod:`agentrag_verl.warmstart.teacher`): the
structures of §3.3 (Eq. 6), ``<think> (<search> <information> <reflect>)+ <answer>`` with retrieval and
``<think> <reflect> <answer>`` without. After ``</search>`` the environment writes
``\\n\\n<information>{docs}</information>\\n\\n``; each search round closes with the reflection on its passages.
Its queries are keywords (:func:`keyword_query`): the search reward (Eq. 9) pays -1 for a single query that is a
natural-language question, which the plans' queries are."""

from agentrag_verl.methods.multistage.reward import AUXILIARY_OPENERS, ConcisenessRules
from agentrag_verl.warmstart.teacher import (
    GIVE_UP_ANSWER,
    NOT_FOUND,
    REASON_DIRECT,
    REASON_FIRST,
    REASON_NEXT,
    TeacherTemplates,
)


def keyword_query(question: str, rules: ConcisenessRules | None = None) -> str:
    """A natural-language question as the keyword query that §3's conciseness asks for: in its own order, without
    its question mark, question words, auxiliaries and stopwords (the lists of ``rules``). The stand-in teacher writes
    the multi-stage format's queries this way, so that its demonstrations do not earn r_s = -1 on every single search.

    >>> keyword_query("Who wrote the poetry collection The Trendane Poems?")
    'wrote poetry collection Trendane Poems'
    >>> keyword_query("In what year did Sevock Kelow die?"), keyword_query("What is it?")
    ('year Sevock Kelow die', 'What is it')
    >>> from agentrag_verl.methods.multistage.reward import is_concise
    >>> is_concise(keyword_query("What is the capital of the province of Wirvary?"))
    True
    """
    rules = rules or ConcisenessRules()
    drop = rules.question_words | AUXILIARY_OPENERS | rules.stopwords
    text = question.strip().rstrip("?").strip()
    return " ".join(w for w in text.split() if w.strip(".,;:!\"'()").lower() not in drop) or text


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
