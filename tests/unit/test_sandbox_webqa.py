"""The webqa sandbox domain: quality, determinism, real retrieval, and each noise effect of
DESIGN §4 shown statistically with fixed seeds."""

from __future__ import annotations

import statistics

import pytest

from orchrm.execution.sandbox.domain import Retrieval
from orchrm.execution.sandbox.noise import NoiseConfig
from orchrm.execution.sandbox.webqa import WebqaDomain, em_quality, f1_quality
from orchrm.execution.tasks.webqa import SQUAD_FILE, build_corpus, load_builtin, load_squad
from tests.unit._qa_helpers import (
    BACKEND,
    COT_L,
    COT_REFLECT_S,
    COT_S,
    SC7_S,
    execute,
    mean_quality,
    search,
    use_real_data,
)


@pytest.fixture(scope="module")
def pool():
    return load_builtin(800, seed=321)


def pick(
    pool,
    *,
    n: int,
    trap: bool,
    popularity: str | None = None,
    specific: bool | None = None,
    lookalikes: bool = False,
):
    corpus = build_corpus()
    out = [
        t
        for t in pool
        if t.metadata["trap"] == trap
        and (popularity is None or t.metadata["popularity"] == popularity)
        and (specific is None or t.metadata["specific"] == specific)
        and (
            not lookalikes
            or any(
                corpus.pages[d].values.get(t.metadata["attribute"]) not in (None, t.reference)
                for d in corpus.distractors.get(t.metadata["entity"], ())
            )
        )
    ]
    assert len(out) >= n, "the generator should offer enough questions of this kind"
    return out[:n]


# quality --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("prediction", "answers", "f1", "em"),
    [
        ("Denver Broncos", ["Denver Broncos", "the Denver Broncos"], 1.0, 1.0),
        ("the Broncos", ["Denver Broncos"], 2 / 3, 0.0),
        ("Port Ellis", "Port Ellison", 0.5, 0.0),
        ("48,210", "48210", 1.0, 1.0),
        ("1843", "1844", 0.0, 0.0),
        (None, "Lena Moor", 0.0, 0.0),
    ],
)
def test_quality_functions_on_hand_computed_examples(prediction, answers, f1, em):
    assert f1_quality(prediction, answers) == pytest.approx(f1)
    assert em_quality(prediction, answers) == em


def test_domain_quality_is_f1_against_every_valid_answer(pool):
    dom = WebqaDomain(NoiseConfig())
    task = pool[0]
    assert dom.quality(task, task.reference) == 1.0
    assert dom.quality(task, "nothing like it") == 0.0


# determinism, text, tokens ---------------------------------------------------------------------
def test_same_seed_same_execution_and_more_samples_cost_more(pool):
    task = pool[5]
    plan = search(SC7_S, queries=2, top_k=4)
    a, cost_a = execute(task, plan, seed=9)
    b, cost_b = execute(task, plan, seed=9)
    assert (a.content, a.answer, cost_a) == (b.content, b.answer, cost_b)
    _, cost1 = execute(task, COT_S, seed=1)
    _, cost7 = execute(task, SC7_S, seed=1)
    assert cost7 > 5 * cost1
    out, _ = execute(task, search(COT_S, top_k=3), seed=2)
    assert out.content.rstrip().endswith(f"Answer: {out.answer}") and "page" in out.content


def test_websearch_is_bm25_and_specific_questions_retrieve_the_gold_page_more_often(pool):
    def recall(tasks):
        return statistics.mean(
            BACKEND.quality(
                t, execute(t, '<agent id="s" type="WebSearch" queries="1" top_k="1"/>', seed=0)[0]
            )
            for t in tasks
        )

    specific, vague = (
        pick(pool, n=40, trap=False, specific=True),
        pick(pool, n=40, trap=False, specific=False),
    )
    assert recall(specific) > 0.8
    assert recall(specific) >= recall(vague)
    out, _ = execute(specific[0], '<agent id="s" type="WebSearch" queries="3" top_k="4"/>', seed=0)
    assert isinstance(out.state, Retrieval) and out.state.queries[0] == specific[0].question
    assert len(out.state.queries) >= 2 and out.state.queries[1].startswith(specific[0].question)


# noise effects (DESIGN §4) -----------------------------------------------------------------------
def test_trap_errors_are_correlated_so_voting_cannot_help_but_a_larger_tier_can(pool):
    traps = pick(pool, n=6, trap=True)
    cot, sc = mean_quality(traps, COT_S, 60), mean_quality(traps, SC7_S, 60)
    assert sc <= cot + 0.05
    assert mean_quality(traps, COT_L, 60) >= cot + 0.2


def test_small_reflexion_over_corrects_on_easy_questions(pool):
    easy = pick(pool, n=6, trap=False, popularity="famous")
    assert mean_quality(easy, COT_REFLECT_S, 120) < mean_quality(easy, COT_S, 120) - 0.04


def test_retrieval_helps_obscure_questions_and_distracts_on_famous_ones(pool):
    obscure = pick(pool, n=6, trap=False, popularity="obscure")
    famous = pick(pool, n=8, trap=False, popularity="famous", specific=False, lookalikes=True)
    assert (
        mean_quality(obscure, search(COT_S, top_k=3), 40) > mean_quality(obscure, COT_S, 40) + 0.3
    )
    assert (
        mean_quality(famous, search(COT_S, queries=2, top_k=10), 60)
        < mean_quality(famous, COT_S, 60) - 0.05
    )


def test_vague_questions_confuse_every_sample_alike_specific_ones_do_not(pool):
    plan_cot, plan_sc = search(COT_S, queries=2, top_k=6), search(SC7_S, queries=2, top_k=6)
    vague = pick(pool, n=8, trap=False, popularity="obscure", specific=False, lookalikes=True)
    specific = pick(pool, n=8, trap=False, popularity="obscure", specific=True, lookalikes=True)
    vague_gain = mean_quality(vague, plan_sc, 40) - mean_quality(vague, plan_cot, 40)
    specific_gain = mean_quality(specific, plan_sc, 40) - mean_quality(specific, plan_cot, 40)
    assert specific_gain > vague_gain
    assert mean_quality(specific, plan_cot, 40) > mean_quality(vague, plan_cot, 40)


# SQuAD (real data; skipped without it) -----------------------------------------------------------
@pytest.fixture
def squad(monkeypatch):
    use_real_data(monkeypatch, SQUAD_FILE, "SQuAD")
    return load_squad(30, seed=5)


def test_squad_reader_extracts_spans_from_retrieved_paragraphs(squad):
    recall = statistics.mean(
        BACKEND.quality(
            t, execute(t, '<agent id="s" type="WebSearch" queries="1" top_k="5"/>', seed=0)[0]
        )
        for t in squad
    )
    assert recall > 0.7  # BM25 over the 2,067 paragraphs
    closed = mean_quality(squad, COT_S, 10)
    searched = mean_quality(squad, search(COT_S, top_k=3), 10)
    assert closed < 0.5 < searched
    task = squad[0]
    out, _ = execute(task, search(COT_L, top_k=3), seed=0)
    assert BACKEND.quality(task, out) == f1_quality(out.answer, task.metadata["answers"])
