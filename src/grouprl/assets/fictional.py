"""Built-in task: questions about a small encyclopedia of invented things, from a seed.

The encyclopedia holds towns, people, creatures and inventions whose names are
made of random syllables and whose facts are drawn at random, so no model
knows them: a question can only be answered by finding the entity's passage
(for instance with the search tool over ``builtin:fictional``). Each entity has
one passage, its name as the title and two to four sentences::

    title: Stengri Roduntor
    text:  Stengri Roduntor was a chandler born in Thomorhal in 1501. Roduntor grew
           up beside the Zusel River and never left the region.

    question: In which town was Stengri Roduntor born?
    answer:   ["Thomorhal"]

Each question asks one fact of one entity; ``answer`` lists the accepted
strings, the first being the one written in the passage (a river also accepts
"Varn River", a person also their family name). The test split is made of
whole entities: no fact about a test entity is asked in the train split, but
the corpus holds every entity. Only ``random.Random`` is used, so the corpus
and the splits are the same on every machine and Python version.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

SEED = 4_242
SPLITS = ("train", "test")
SPLIT_SIZES = {"train": 1_408, "test": 200}
"""Questions per split; a unit test checks these against the generator."""

COUNTS = {"town": 110, "person": 220, "creature": 80, "invention": 90}

SYLLABLES = (
    "vel", "mor", "dris", "sa", "ka", "lin", "tho", "ren", "qua", "bri", "sel", "dun", "ar",
    "ish", "ol", "mae", "zu", "fen", "cor", "tal", "vir", "nes", "ul", "ga", "ro", "pel",
    "ash", "im", "tor", "wy", "len", "ox", "bra", "ny", "sca", "dor", "ev", "hal", "ju",
    "mir", "pra", "sten", "ulv", "yor", "zen", "cai", "fal", "gri", "lo", "nor",
)  # fmt: skip
PROFESSIONS = (
    "clockmaker", "cartographer", "glassblower", "astronomer", "ferry pilot", "beekeeper",
    "lute maker", "botanist", "stonemason", "archivist", "dyer", "bell founder",
    "lens grinder", "shipwright", "falconer", "weaver", "herbalist", "printer", "surveyor",
    "tanner", "cooper", "chandler", "organ builder", "puppeteer", "salt merchant",
    "tea blender", "bookbinder", "locksmith", "kite maker", "mosaicist",
)  # fmt: skip
GOODS = (
    "copper bells", "blue glass", "smoked eels", "paper lanterns", "wool blankets",
    "honey cakes", "clock towers", "boat races", "painted boats", "stone bridges",
    "goat cheese", "rope ladders", "silver thread", "plum brandy", "kite festivals",
    "salt caves", "hot springs", "rose gardens", "tin whistles", "walnut bread",
    "felt hats", "horse fairs", "marble quarries", "cider presses", "puppet theatres",
    "oyster beds", "lace collars", "windmills", "pear orchards", "bell ringers",
)  # fmt: skip
DIETS = (
    "river snails", "pine seeds", "moths", "lichen", "fallen plums", "reed shoots", "beetles",
    "small fish", "mushrooms", "acorns", "clover", "frogs", "blackberries", "tree bark",
    "crayfish", "dragonflies", "marsh grass", "wild figs", "earthworms", "sea kelp",
)  # fmt: skip
ANIMALS = ("lizard", "owl", "beetle", "hare", "heron", "eel", "moth", "fox", "toad", "deer")
SIZES = ("tiny", "small", "slender", "stout", "large", "long-legged")
COLOURS = ("grey", "rust-red", "pale green", "striped", "speckled", "black", "golden")
DEVICES = ("loom", "engine", "lamp", "compass", "pump", "clock", "press", "kiln", "harp", "lock")
PURPOSES = (
    "to measure rainfall", "to spin silk faster", "to lift water from wells",
    "to keep time at sea", "to print maps in colour", "to fire glass evenly",
    "to light mine shafts", "to play several notes at once", "to find north in fog",
    "to keep granaries shut",
)  # fmt: skip


@dataclass
class Entity:
    """One thing in the encyclopedia; ``questions`` are filled once its passage id is set."""

    kind: str
    name: str
    passage_id: str = ""
    facts: dict[str, str] = field(default_factory=dict)
    text: str = ""
    questions: list[dict] = field(default_factory=list)


Asked = list[tuple[str, list[str]]]
"""Questions about one entity, each with its accepted answers (passage's wording first)."""


class _Names:
    """Capitalised words of two or three syllables, each handed out once."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def word(self) -> str:
        while True:
            word = "".join(self.rng.sample(SYLLABLES, self.rng.choice((2, 2, 3)))).capitalize()
            if len(word) >= 5 and word not in self.used:
                self.used.add(word)
                return word


def _question(entity: Entity, question: str, answer: list[str]) -> None:
    assert answer[0] in entity.text, (answer[0], entity.text)
    entity.questions.append(
        {
            "question": question,
            "answer": answer,
            "entity": entity.name,
            "passage_id": entity.passage_id,
        }
    )


def _town(
    rng: random.Random, names: _Names, rivers: list[str], regions: list[str]
) -> tuple[Entity, Asked]:
    name = names.word()
    river, region = rng.choice(rivers), rng.choice(regions)
    year, goods = str(rng.randint(700, 1700)), rng.choice(GOODS)
    town = Entity("town", name, facts={"river": river, "region": region})
    first = rng.choice(
        (
            f"{name} is a town on the {river} River in the region of {region}.",
            f"{name} is a market town in {region}, built along the {river} River.",
        )
    )
    town.text = (
        f"{first} It was founded in {year}. "
        f"{rng.choice(('Today', 'For centuries'))} {name} has been famous for its {goods}."
    )
    return town, [
        (f"On which river does the town of {name} lie?", [river, f"{river} River"]),
        (f"In which region is the town of {name}?", [region]),
        (f"In what year was {name} founded?", [year]),
        (f"What is the town of {name} famous for?", [goods]),
    ]


def _person(
    rng: random.Random, names: _Names, given: list[str], towns: list[Entity]
) -> tuple[Entity, Asked]:
    family = names.word()
    name = f"{rng.choice(given)} {family}"
    town, year, job = rng.choice(towns), str(rng.randint(1500, 1950)), rng.choice(PROFESSIONS)
    person = Entity("person", name, facts={"born": year})
    lines = [
        rng.choice(
            (
                f"{name} was a {job} born in {town.name} in {year}.",
                f"{name} (born {year} in {town.name}) was a {job}.",
            )
        ),
        f"{family} grew up beside the {town.facts['river']} River",
    ]
    lines[1] += rng.choice((" and later moved to the coast.", " and never left the region."))
    if rng.random() < 0.5:
        lines.append(f"{family} kept {rng.randint(2, 9)} notebooks that survive today.")
    person.text = " ".join(lines)
    return person, [
        (f"In which town was {name} born?", [town.name]),
        (f"In what year was {name} born?", [year]),
        (f"What was the profession of {name}?", [job]),
    ]


def _creature(rng: random.Random, names: _Names, regions: list[str]) -> tuple[Entity, Asked]:
    name = names.word()
    animal, region, diet = rng.choice(ANIMALS), rng.choice(regions), rng.choice(DIETS)
    year = str(rng.randint(1600, 1990))
    creature = Entity("creature", name)
    size, colour = rng.choice(SIZES), rng.choice(COLOURS)
    creature.text = (
        f"The {name} is a {size} {colour} {animal} found only in {region}. "
        f"It feeds mainly on {diet}. "
        f"The {name} was first described by naturalists in {year}."
    )
    return creature, [
        (f"In which region does the {name} live?", [region]),
        (f"What does the {name} mainly eat?", [diet]),
        (f"In what year was the {name} first described?", [year]),
    ]


def _invention(
    rng: random.Random, names: _Names, people: list[Entity], towns: list[Entity]
) -> tuple[Entity, Asked]:
    name = f"{names.word()} {rng.choice(DEVICES)}"
    inventor, town = rng.choice(people), rng.choice(towns)
    family = inventor.name.split()[-1]
    year = str(int(inventor.facts["born"]) + rng.randint(20, 60))
    invention = Entity("invention", name)
    invention.text = (
        f"The {name} is a device made {rng.choice(PURPOSES)}. "
        f"It was invented by {inventor.name} in {year} and first built in {town.name}."
    )
    return invention, [
        (f"Who invented the {name}?", [inventor.name, family]),
        (f"In what year was the {name} invented?", [year]),
        (f"In which town was the {name} first built?", [town.name]),
    ]


def encyclopedia() -> list[Entity]:
    """Every entity with its passage and questions, in a fixed order."""
    rng = random.Random(SEED)
    names = _Names(rng)
    rivers = [names.word() for _ in range(40)]
    regions = [names.word() for _ in range(25)]
    given = [names.word() for _ in range(60)]
    made: list[tuple[Entity, Asked]] = []
    towns: list[Entity] = []
    people: list[Entity] = []
    for _ in range(COUNTS["town"]):
        made.append(_town(rng, names, rivers, regions))
        towns.append(made[-1][0])
    for _ in range(COUNTS["person"]):
        made.append(_person(rng, names, given, towns))
        people.append(made[-1][0])
    made += [_creature(rng, names, regions) for _ in range(COUNTS["creature"])]
    made += [_invention(rng, names, people, towns) for _ in range(COUNTS["invention"])]
    for number, (entity, asked) in enumerate(made):
        entity.passage_id = f"fictional-{number:04d}"
        for question, answer in asked:
            _question(entity, question, answer)
    return [entity for entity, _ in made]


def passages() -> list[dict[str, str]]:
    """The corpus: one ``{"id", "title", "text"}`` passage per entity."""
    return [{"id": e.passage_id, "title": e.name, "text": e.text} for e in encyclopedia()]


def questions(split: str) -> list[dict]:
    """The ``train`` or ``test`` questions: ``question``, ``answer`` (accepted strings),
    ``entity`` and ``passage_id`` (the passage that answers it)."""
    if split not in SPLITS:
        raise ValueError(f"fictional split {split!r} does not exist; choose one of {list(SPLITS)}")
    entities = encyclopedia()
    order = list(range(len(entities)))
    random.Random(SEED + 1).shuffle(order)
    test: list[dict] = []
    held_out: set[int] = set()
    for index in order:
        if len(test) >= SPLIT_SIZES["test"]:
            break
        held_out.add(index)
        # The last held-out entity may lose a question or two to keep the split at its size;
        # those questions are dropped, never moved to train.
        test += entities[index].questions[: SPLIT_SIZES["test"] - len(test)]
    if split == "test":
        return test
    return [q for i, e in enumerate(entities) if i not in held_out for q in e.questions]


def builtin_rows(split: str, size: int | None) -> tuple[list[dict], list[str]]:
    """Rows for ``builtin:fictional``: ``question``, ``answer`` (accepted strings),
    ``entity`` and ``passage_id``."""
    rows = questions(split)
    return (rows if size is None else rows[:size]), ["answer", "entity", "passage_id", "question"]
