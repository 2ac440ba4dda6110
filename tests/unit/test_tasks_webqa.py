"""webqa task sources: the built-in web corpus, the SQuAD loader, the question features and
heuristic, and free-text parsing."""

from __future__ import annotations

import statistics

import pytest

from orchrm.errors import TaskError
from orchrm.execution.tasks import load_tasks, sources
from orchrm.execution.tasks.webqa import (
    SQUAD_FILE,
    TEMPLATES,
    TRAP_SIBLING,
    build_corpus,
    from_text,
    heuristic_plan_score,
    is_trap_question,
    load_builtin,
    load_squad,
    question_features,
    squad_corpus,
    squad_popularity,
)
from orchrm.plans import Plan
from tests.unit._qa_helpers import (
    CLOSED,
    LARGE,
    VOTE,
    assert_builtin_deterministic_per_seed,
    use_real_data,
)


def test_sources_are_registered():
    assert ("webqa", "builtin") in sources() and ("webqa", "squad") in sources()


def test_builtin_is_deterministic_per_seed_and_differs_across_seeds():
    assert_builtin_deterministic_per_seed("webqa")


def test_builtin_tasks_ask_one_fact_stated_on_the_gold_page():
    corpus = build_corpus()
    tasks = load_builtin(300, seed=11)
    assert len({t.task_id for t in tasks}) == 300
    for t in tasks:
        e = corpus.entities[t.metadata["entity"]]
        attr = t.metadata["attribute"]
        assert t.reference == e.values[attr] == t.metadata["answers"][0]
        assert t.reference in corpus.pages[e.eid].text
        assert e.name in t.question and attr in TEMPLATES[e.type]
        assert t.metadata["trap"] == (attr in TRAP_SIBLING)
    assert 0.3 < statistics.mean(t.metadata["specific"] for t in tasks) < 0.7


def test_distractor_pages_look_alike_but_state_other_values():
    corpus = build_corpus()
    archived = [
        (eid, d) for eid, ds in corpus.distractors.items() for d in ds if d.endswith("-archive")
    ]
    twins = [
        (eid, d) for eid, ds in corpus.distractors.items() for d in ds if not d.endswith("-archive")
    ]
    assert archived and twins
    eid, d = archived[0]
    page, gold = corpus.pages[d], corpus.pages[eid]
    assert page.entity == eid and corpus.entities[eid].name in page.title
    changed = {
        a
        for a in ("mayor", "ceo", "employer")
        if a in gold.values and page.values[a] != gold.values[a]
    }
    assert changed  # an outdated office holder
    eid, d = twins[0]
    assert corpus.pages[d].entity != eid and set(corpus.pages[d].title.split()) & set(
        corpus.pages[eid].title.split()
    )


# features and heuristic ------------------------------------------------------------------------
def test_features_see_specificity_traps_and_obscure_names():
    tasks = load_builtin(400, seed=12)
    spec = {
        s: statistics.mean(
            question_features(t.question)["specificity"]
            for t in tasks
            if t.metadata["specific"] == s
        )
        for s in (True, False)
    }
    assert spec[True] > spec[False] + 0.4
    assert all(question_features(t.question)["trap"] == 1.0 for t in tasks if t.metadata["trap"])
    obsc = {
        p: statistics.mean(
            question_features(t.question)["obscurity"]
            for t in tasks
            if t.metadata["popularity"] == p
        )
        for p in ("famous", "obscure")
    }
    assert obsc["obscure"] > obsc["famous"] + 0.2


@pytest.mark.parametrize(
    ("question", "trap"),
    [
        ("Who was the CEO of Orison Pictures before the current one?", True),
        ("Which NFL team did not win Super Bowl 50?", True),
        ("What is the population of Port Ellison?", False),
    ],
)
def test_trap_phrasings(question, trap):
    assert is_trap_question(question) is trap


def test_squad_popularity_from_the_question():
    assert squad_popularity("How many yards did Newton run in the second quarter?") == "obscure"
    assert squad_popularity("Who founded the Yuan dynasty?") == "known"


SEARCH = Plan.parse(
    '<agent id="s" type="WebSearch" queries="1" top_k="3"/><agent id="a" type="CoT" model="small"/><edge from="s" to="a"/>'
)
WIDE = Plan.parse(
    '<agent id="s" type="WebSearch" queries="2" top_k="12"/><agent id="a" type="CoT" model="small"/><edge from="s" to="a"/>'
)


def test_heuristic_reads_obscurity_vagueness_and_traps():
    obscure = question_features(
        "Which award did Kallistro T. Oyelar-Vanderhoek, the historian, win?"
    )
    famous = question_features("Who founded Orison Pictures?")
    trap = question_features("Who was the CEO of Orison Pictures before the current one?")
    assert heuristic_plan_score(obscure, SEARCH) > heuristic_plan_score(obscure, CLOSED)
    assert heuristic_plan_score(famous, CLOSED) > heuristic_plan_score(famous, WIDE)
    assert heuristic_plan_score(famous, SEARCH) > heuristic_plan_score(famous, WIDE)
    assert heuristic_plan_score(trap, LARGE) > heuristic_plan_score(trap, VOTE)


# free text -------------------------------------------------------------------------------------
def test_from_text_matches_builtin_questions_and_refuses_others():
    for t in load_builtin(20, seed=14):
        parsed = from_text("  " + t.question.lower() + " ")
        assert (
            parsed is not None
            and parsed.reference == t.reference
            and parsed.metadata["attribute"] == t.metadata["attribute"]
        )
    assert from_text("What is the capital of France?") is None


# SQuAD -----------------------------------------------------------------------------------------
def test_squad_missing_file_names_it_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHRM_DATA_DIR", str(tmp_path))
    with pytest.raises(TaskError, match=r"squad/dev-v1\.1\.json.*ORCHRM_DATA_DIR"):
        load_squad(5, seed=0)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"version": "1.1", "data": [{"title": "A", "paragr', r"dev-v1\.1\.json: not a SQuAD v1\.1 file \(JSONDecodeError"),
        ('{"examples": []}', r"dev-v1\.1\.json: not a SQuAD v1\.1 file \(KeyError"),
        ('{"data": [{"title": "A", "paragraphs": [{"qas": []}]}]}', r"an item lacks or mistypes a field \(KeyError: 'context'"),
    ],
)
def test_a_truncated_or_foreign_squad_file_is_named(tmp_path, monkeypatch, text, match):
    (tmp_path / "squad").mkdir()
    (tmp_path / SQUAD_FILE).write_text(text)
    monkeypatch.setenv("ORCHRM_DATA_DIR", str(tmp_path))
    with pytest.raises(TaskError, match=match):
        load_squad(5, seed=0)
        squad_corpus(str(tmp_path / SQUAD_FILE))


def test_squad_loader_on_real_data(monkeypatch):
    use_real_data(monkeypatch, SQUAD_FILE, "SQuAD")
    tasks = load_tasks("webqa", 60, seed=1, source="squad")
    assert len(tasks) == 60 and len({t.task_id for t in tasks}) == 60
    assert [t.task_id for t in load_squad(60, seed=1)] == [t.task_id for t in tasks]
    for t in tasks:
        answers = t.metadata["answers"]
        assert (
            t.reference == answers[0] and t.metadata["kind"] == "squad" and "#" in t.metadata["doc"]
        )
    assert any(len(t.metadata["answers"]) > 1 for t in tasks)  # every annotator's answer is valid
