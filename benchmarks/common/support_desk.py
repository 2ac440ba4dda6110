"""Another system's traces: a support-desk orchestrator, in the schema ``orchrm ingest`` reads.

Each ticket states its category (billing, technical, account, shipping) and urgency (low, high) in
its text, and those two decide which of six plans resolves it (:data:`WORKING_PLAN`): neither alone
does. Every plan runs a few times per ticket (``run_id``) and each run either resolves the ticket
or not (``quality`` 0 or 1), drawn from the plan's expected quality on that ticket
(:func:`expected_quality`). A reward model that reads the question can learn the rule; one that
only reads the plan cannot do better than "escalate when in doubt".

Plans are OrchRM plan texts (``<agent .../>`` lines, one trace row per agent) whose roles name the
desk's own teams, never the category words, so the rule has to be learned, not matched.

The training-defaults sweep (``python -m benchmarks.sweep_defaults``) tunes on seed 101; the tests
judge the chosen defaults on other seeds of the same generator (``tests/fixtures/foreign_traces.py``,
which tests import since they import nothing from ``benchmarks``): change both or neither.

>>> traces = make_traces(n_tickets=4, seed=0)
>>> sorted(set(traces.plan_id)) == sorted(PLANS)
True
>>> set(traces.quality) <= {0.0, 1.0}
True
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

CATEGORIES: tuple[str, ...] = ("billing", "technical", "account", "shipping")
URGENCIES: tuple[str, ...] = ("low", "high")

#: plan name -> plan text; each plan's first agent has a role no other plan's has, so no two plans
#: share a prefix (no intermediate pairs: the signal is the plan-level rule)
PLANS: Mapping[str, str] = {
    "auto_reply": '<agent id="a1" type="CoT" model="small" role="auto_reply"/>',
    "kb_search": (
        '<agent id="a1" type="WebSearch" queries="2" top_k="5" role="kb_search"/>\n'
        '<agent id="a2" type="CoT" model="small" role="kb_reply"/>\n'
        '<edge from="a1" to="a2"/>'
    ),
    "refund_desk": '<agent id="a1" type="CoT" model="large" role="refund_desk"/>',
    "debugger": '<agent id="a1" type="Reflexion" model="large" iterations="2" role="debugger"/>',
    "identity_check": '<agent id="a1" type="SelfConsistency" model="small" k="3" role="identity_check"/>',
    "escalation": (
        '<agent id="a1" type="CoT" model="small" role="triage"/>\n'
        '<agent id="a2" type="Debate" model="large" agents="2" rounds="1" role="escalation"/>\n'
        '<edge from="a1" to="a2"/>'
    ),
}

#: (category, urgency) -> the plan that resolves such a ticket
WORKING_PLAN: Mapping[tuple[str, str], str] = {
    ("billing", "low"): "refund_desk",
    ("billing", "high"): "escalation",
    ("technical", "low"): "kb_search",
    ("technical", "high"): "debugger",
    ("account", "low"): "identity_check",
    ("account", "high"): "escalation",
    ("shipping", "low"): "auto_reply",
    ("shipping", "high"): "kb_search",
}

#: expected quality of the working plan, of escalating an urgent ticket it does not fit, of the rest
P_WORKING, P_ESCALATED, P_OTHER = 0.85, 0.45, 0.1

_NAMES = ["Ada", "Bram", "Chloe", "Dev", "Elif", "Femi", "Greta", "Hugo", "Ines", "Jon", "Kira", "Luca"]
_BODIES: Mapping[str, Sequence[str]] = {
    "billing": [
        "I was charged {n} dollars twice for my {item} subscription this month.",
        "My invoice {id} shows {n} dollars but I cancelled the {item} plan.",
        "Please refund the {n} dollars taken for the {item} add-on I never used.",
    ],
    "technical": [
        "The {item} app crashes every time I open the settings page (error {id}).",
        "Sync of my {item} data has been stuck at {n} percent since yesterday.",
        "After the update the {item} export fails with code {id}.",
    ],
    "account": [
        "I cannot log in to my {item} account; the reset link {id} has expired.",
        "Someone changed the email on my {item} account, I did not do that.",
        "Please merge my two {item} accounts, the old one is {id}.",
    ],
    "shipping": [
        "My {item} order {id} has not arrived after {n} days.",
        "The tracking page for order {id} has not moved for {n} days.",
        "I received a damaged {item} in order {id} and need a replacement.",
    ],
}
_ITEMS = ["Pro", "Family", "Studio", "Cloud", "Basic", "Team"]
_URGENCY_NOTES: Mapping[str, Sequence[str]] = {
    "low": ["No rush.", "Whenever you can.", "Just letting you know."],
    "high": ["This is blocking my whole team.", "I need this fixed today.", "Please treat this as urgent."],
}


@dataclass(frozen=True)
class Ticket:
    """One support ticket: its id, the question text a reward model sees, and the two facts in it."""

    task_id: str
    question: str
    category: str
    urgency: str


def make_tickets(n_tickets: int, *, seed: int) -> list[Ticket]:
    """``n_tickets`` tickets, the (category, urgency) combinations in equal shares, in seeded order."""
    rng = random.Random(seed)
    combos = list(itertools.product(CATEGORIES, URGENCIES))
    tickets = []
    for i in range(n_tickets):
        category, urgency = combos[i % len(combos)]
        body = rng.choice(_BODIES[category]).format(
            n=rng.randint(2, 99), id=f"{rng.choice('ABCDEFGH')}{rng.randint(1000, 9999)}", item=rng.choice(_ITEMS)
        )
        question = (
            f"Ticket {seed}-{i} | category: {category} | urgency: {urgency}\n"
            f"{rng.choice(_NAMES)} writes: {body} {rng.choice(_URGENCY_NOTES[urgency])}"
        )
        tickets.append(Ticket(f"ticket-{seed}-{i}", question, category, urgency))
    rng.shuffle(tickets)
    return tickets


def expected_quality(ticket: Ticket, plan: str) -> float:
    """The probability that one run of ``plan`` (a name in :data:`PLANS`) resolves ``ticket``."""
    if plan == WORKING_PLAN[(ticket.category, ticket.urgency)]:
        return P_WORKING
    if plan == "escalation" and ticket.urgency == "high":
        return P_ESCALATED
    return P_OTHER


def traces_of(tickets: Sequence[Ticket], *, seed: int, runs: int = 3) -> pd.DataFrame:
    """The traces of every plan on every ticket, ``runs`` runs each: one row per agent output, with
    ``task_id``, ``question``, ``plan_id`` (the plan's name), ``run_id``, ``node_id``,
    ``plan_text``, ``content`` and ``quality`` (the run's 0/1 outcome, on every row of the run)."""
    rng = np.random.default_rng(seed)
    rows = []
    for ticket in tickets:
        for name, text in PLANS.items():
            nodes = [line.split('id="')[1].split('"')[0] for line in text.splitlines() if line.startswith("<agent")]
            for run in range(runs):
                resolved = float(rng.random() < expected_quality(ticket, name))
                for node in nodes:
                    final = node == nodes[-1]
                    content = (
                        f"Reply to the customer ({name}, run {run}): we have looked into your request."
                        if final
                        else f"Notes ({name}): ticket read, {int(rng.integers(1, 6))} similar cases found."
                    )
                    rows.append({
                        "task_id": ticket.task_id, "question": ticket.question, "plan_id": name,
                        "run_id": f"run-{run}", "node_id": node, "plan_text": text, "content": content,
                        "quality": resolved,
                    })
    return pd.DataFrame(rows)


def make_traces(n_tickets: int = 600, *, seed: int = 0, runs: int = 3) -> pd.DataFrame:
    """:func:`traces_of` ``make_tickets(n_tickets, seed=seed)``."""
    return traces_of(make_tickets(n_tickets, seed=seed), seed=seed, runs=runs)


def true_pair_accuracy(score: Callable[[str, list[str]], Sequence[float]], tickets: Sequence[Ticket]) -> float:
    """Fraction of the plan pairs of ``tickets`` that ``score(question, plan_texts)`` orders
    right: every pair of plans whose expected quality on a ticket differs (a tie counts as wrong)."""
    names = list(PLANS)
    right = total = 0
    for ticket in tickets:
        rewards = dict(zip(names, (float(r) for r in score(ticket.question, [PLANS[n] for n in names])), strict=True))
        for a, b in itertools.combinations(names, 2):
            qa, qb = expected_quality(ticket, a), expected_quality(ticket, b)
            if qa != qb:
                total += 1
                right += (rewards[a] - rewards[b]) * (qa - qb) > 0
    return right / total
