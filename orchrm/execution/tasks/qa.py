"""What the question-answering task sources (:mod:`.multihop`, :mod:`.webqa`) share.

- synthetic entity names whose style shows popularity (:func:`make_name`, :func:`name_style`,
  :func:`unique_name`), used by both built-in worlds;
- :func:`distinct_tasks`, the "draw until ``n`` distinct questions" loop of the built-in
  generators.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from orchrm.errors import TaskError
from orchrm.execution.tasks.base import Task

POPULARITY = ("famous", "known", "obscure")

_ON = [
    "b",
    "d",
    "f",
    "g",
    "h",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "z",
    "br",
    "st",
    "tr",
    "gr",
    "th",
]
_VO = ["a", "e", "i", "o", "u", "a", "e", "o", "ai", "ou", "ia"]
_CO = ["", "", "", "n", "r", "l", "s", "m"]
_ADJ = [
    "Midnight",
    "Silent",
    "Golden",
    "Broken",
    "Last",
    "Crimson",
    "Hidden",
    "Distant",
    "Winter",
    "Paper",
    "Iron",
    "Glass",
    "Quiet",
    "Burning",
    "Velvet",
    "Northern",
    "Salt",
    "Hollow",
    "Electric",
    "Wild",
]
_NOUN = [
    "Harbor",
    "Orchard",
    "Signal",
    "Empire",
    "River",
    "Garden",
    "Crown",
    "Mirror",
    "Station",
    "Lantern",
    "Frontier",
    "Tide",
    "Canyon",
    "Letter",
    "Circus",
    "Meridian",
    "Shadow",
    "Summer",
    "Bridge",
    "Anthem",
]
_PLURAL = ["Lanterns", "Rivers", "Letters", "Mirrors", "Bridges", "Winters", "Shadows", "Crowns"]
_OBS_FILM = [
    "Nocturne for",
    "Elegy of",
    "Ballad of",
    "Chronicle of",
    "Fragments of",
    "Requiem for",
    "Testament of",
]
_NUMS = ["Seven", "Three", "Nine", "Eleven", "Twelve", "Forty"]
_CO_SUFFIX = ["Pictures", "Studios", "Films", "Media", "Entertainment"]
_OBS_CO = [
    "Cinematographic Cooperative",
    "Audiovisual Consortium Ltd.",
    "Film & Sound Collective",
    "Moving-Picture Syndicate",
]
_CITY_FORM = ["{w}", "Port {w}", "{w} Falls", "{w}ton", "San {w}", "{w}burg"]
_OBS_CITY = ["Upper {w}-on-{v}", "{w}-{v} Crossing", "Lower {w} by the {v}", "{w}-sur-{v}"]


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(
        rng.choice(_ON) + rng.choice(_VO) + rng.choice(_CO) for _ in range(syllables)
    ).capitalize()


def name_style(rng: random.Random, popularity: str) -> str:
    """Name style usually follows popularity, but not always (the cue is imperfect)."""
    if rng.random() < 0.8:
        return popularity
    return rng.choice(POPULARITY)


def make_name(rng: random.Random, etype: str, style: str) -> str:
    """A synthetic name for an entity of ``etype`` (``country`` | ``city`` | ``person`` |
    ``company`` | ``film``) in the naming ``style`` of a popularity level (obscure entities get
    long, specific names)."""
    w = lambda n: _word(rng, n)  # noqa: E731
    if etype == "country":
        return w(2) + rng.choice(["land", "ia", "stan", "mark", "ora"])
    if etype == "city":
        if style == "obscure":
            return rng.choice(_OBS_CITY).format(w=w(2), v=w(2))
        form = rng.choice(_CITY_FORM) if style == "known" else "{w}"
        return form.format(w=w(2 if style == "known" else rng.choice((1, 2))))
    if etype == "person":
        if style == "famous":
            return f"{w(2)} {w(1)}"
        if style == "known":
            return f"{w(2)} {w(3)}"
        return f"{w(3)} {rng.choice('ABCDEFGHJKLMNPRSTV')}. {w(2)}-{w(3)}"
    if etype == "company":
        if style == "famous":
            return f"{w(2)} {rng.choice(_CO_SUFFIX)}"
        if style == "known":
            return f"{w(2)} Brothers {rng.choice(_CO_SUFFIX)}"
        return f"{w(3)} & {w(2)} {rng.choice(_OBS_CO)}"
    if etype == "film":
        if style == "famous":
            return f"{rng.choice(_ADJ)} {rng.choice(_NOUN)}"
        if style == "known":
            return f"The {rng.choice(_ADJ)} {rng.choice(_NOUN)} of {w(2)}"
        return f"{rng.choice(_OBS_FILM)} {rng.choice(_NUMS)} {rng.choice(_PLURAL)} ({rng.randint(1921, 1989)} short)"
    raise ValueError(etype)


def unique_name(rng: random.Random, etype: str, style: str, taken: set[str]) -> str:
    """:func:`make_name` redrawn until its lowercase form is not in ``taken``; adds it there."""
    name = make_name(rng, etype, style)
    while name.lower() in taken:
        name = make_name(rng, etype, style)
    taken.add(name.lower())
    return name


def distinct_tasks(n: int, draw: Callable[[], Task | None], *, source: str) -> list[Task]:
    """``n`` tasks with distinct ids from repeated ``draw()`` (None: no question this time),
    in first-drawn order. Raises :class:`TaskError` naming ``source`` when it cannot yield
    ``n``."""
    tasks: dict[str, Task] = {}
    tries = 0
    while len(tasks) < n:
        tries += 1
        if tries > 50 * n + 1000:
            raise TaskError(f"{source} yields fewer than {n} distinct questions; ask for fewer")
        task = draw()
        if task is not None:
            tasks.setdefault(task.task_id, task)
    return list(tasks.values())


__all__ = [
    "POPULARITY",
    "distinct_tasks",
    "make_name",
    "name_style",
    "unique_name",
]
