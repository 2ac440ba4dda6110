"""multihop task sources: the built-in knowledge-graph generator, the StrategyQA loader, the
question features and heuristic, and free-text parsing."""

from __future__ import annotations

import statistics

import pytest

from orchrm.errors import TaskError
from orchrm.execution.tasks import load_tasks, sources
from orchrm.execution.tasks.multihop import (
    RELATIONS,
    STRATEGYQA_FILE,
    TRAP_SIBLING,
    build_world,
    fact_popularity,
    from_text,
    heuristic_plan_score,
    is_trap_question,
    load_builtin,
    load_strategyqa,
    question_features,
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
    assert ("multihop", "builtin") in sources() and ("multihop", "strategyqa") in sources()


def test_builtin_is_deterministic_per_seed_and_differs_across_seeds():
    assert_builtin_deterministic_per_seed("multihop")


def test_builtin_tasks_are_valid_chains_over_the_world():
    world = build_world()
    tasks = load_builtin(300, seed=11)
    assert len({t.task_id for t in tasks}) == 300
    hops = set()
    for t in tasks:
        chain = t.metadata["chain"]
        hops.add(len(chain))
        for i, (s, rel, o) in enumerate(chain):
            assert world.entities[s].facts[rel] == o
            assert world.entities[s].type == RELATIONS[rel][0]
            if i:
                assert chain[i - 1][2] == s
        assert t.reference == world.name(chain[-1][2])
        assert world.name(chain[0][0]) in t.question
        assert t.metadata["trap_hops"] == [i for i, h in enumerate(chain) if h[1] in TRAP_SIBLING]
    assert hops == {2, 3, 4}
    assert 0.1 < statistics.mean(bool(t.metadata["trap_hops"]) for t in tasks) < 0.5


def test_world_has_one_document_per_entity_and_near_miss_entities():
    world = build_world()
    assert set(world.texts) == set(world.entities)
    twin_of, twins = next(iter(world.twins.items()))
    base, twin = world.entities[twin_of], world.entities[twins[0]]
    assert twin.twin_of == twin_of and twin.type == base.type and twin.name != base.name
    assert set(base.name.replace(".", "").split()) & set(twin.name.replace(".", "").split())
    for target in base.facts.values():  # the document states every fact of its entity
        assert world.name(target) in world.texts[twin_of]


@pytest.mark.parametrize("n", [1, 57])
def test_load_returns_exactly_n(n):
    assert len(load_builtin(n, seed=0)) == n


# features and heuristic ------------------------------------------------------------------------
def test_features_estimate_hops_and_flag_traps_from_the_text():
    tasks = load_builtin(300, seed=12)
    hits = statistics.mean(
        question_features(t.question)["hops"] == t.metadata["hops"] for t in tasks
    )
    assert hits > 0.9
    assert all(
        question_features(t.question)["trap"] == float(bool(t.metadata["trap_hops"])) for t in tasks
    )


def test_specificity_tracks_hidden_popularity_imperfectly():
    tasks = load_builtin(400, seed=13)
    spec = {
        p: statistics.mean(
            question_features(t.question)["specificity"]
            for t in tasks
            if t.metadata["popularity"][0] == p
        )
        for p in ("famous", "obscure")
    }
    assert spec["obscure"] > spec["famous"] + 0.3
    assert any(
        question_features(t.question)["specificity"] < 0.2
        for t in tasks
        if t.metadata["popularity"][0] == "obscure"
    )


@pytest.mark.parametrize(
    ("question", "trap"),
    [
        (
            "What is the city where the company Orison Pictures was headquartered before it relocated?",
            True,
        ),
        ("Are all limbs required for jujutsu?", True),
        ("Would a pear sink in water?", False),
        ("What is the birthplace of Lena Moor?", False),
    ],
)
def test_trap_phrasings(question, trap):
    assert is_trap_question(question) is trap


SEARCH = Plan.parse(
    '<agent id="s" type="WebSearch" queries="3" top_k="3"/><agent id="a" type="CoT" model="small"/><edge from="s" to="a"/>'
)


def test_heuristic_prefers_search_for_obscure_names_and_large_tier_on_traps():
    obscure = question_features("What is the birthplace of Kallistro T. Oyelar-Vanderhoek?")
    famous = question_features("What is the birthplace of Lena Moor?")
    trap = question_features(
        "What is the city where the company Orison Pictures was headquartered before it relocated?"
    )
    assert heuristic_plan_score(obscure, SEARCH) > heuristic_plan_score(obscure, CLOSED)
    assert heuristic_plan_score(famous, CLOSED) > heuristic_plan_score(famous, SEARCH)
    assert heuristic_plan_score(trap, LARGE) > heuristic_plan_score(trap, VOTE)


# free text -------------------------------------------------------------------------------------
def test_from_text_parses_builtin_questions_and_refuses_others():
    for t in load_builtin(30, seed=14):
        parsed = from_text(t.question)
        assert (
            parsed is not None
            and parsed.metadata["chain"] == t.metadata["chain"]
            and parsed.reference == t.reference
        )
    world = build_world()
    country = next(e for e in world.entities.values() if e.type == "country")
    task = from_text(f"What is the capital of {country.name}?")
    assert task is not None and task.reference == world.name(country.facts["capital"])
    assert from_text("What is the capital of France?") is None
    assert from_text("Tell me a joke") is None


# StrategyQA ------------------------------------------------------------------------------------
def test_strategyqa_missing_file_names_it_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHRM_DATA_DIR", str(tmp_path))
    with pytest.raises(TaskError, match=r"strategyqa/task\.json.*ORCHRM_DATA_DIR"):
        load_strategyqa(5, seed=0)
    monkeypatch.delenv("ORCHRM_DATA_DIR")
    with pytest.raises(TaskError, match="ORCHRM_DATA_DIR is not set"):
        load_strategyqa(5, seed=0)


def test_strategyqa_loader_on_real_data(monkeypatch):
    use_real_data(monkeypatch, STRATEGYQA_FILE, "StrategyQA")
    tasks = load_tasks("multihop", 50, seed=1, source="strategyqa")
    assert len(tasks) == 50 and len({t.task_id for t in tasks}) == 50
    assert {t.reference for t in tasks} == {"Yes", "No"}
    assert all(t.metadata["kind"] == "facts" and t.metadata["facts"] for t in tasks)
    assert [t.task_id for t in load_strategyqa(50, seed=1)] == [t.task_id for t in tasks]


@pytest.mark.parametrize(
    ("fact", "popularity"),
    [
        ("Water freezes at zero degrees.", "famous"),
        ("Boris Yeltsin died on Apr 23, 2007.", "obscure"),
        ("Subway hired Jared Fogle as a spokesman for their sandwich shops.", "known"),
    ],
)
def test_fact_popularity(fact, popularity):
    assert fact_popularity(fact) == popularity


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"examples": [{"input": "Is it?", "targ', r"task\.json: not a StrategyQA file \(JSONDecodeError"),
        ('{"data": []}', r"task\.json: not a StrategyQA file \(KeyError"),
        ('{"examples": [{"input": "Is water wet?", "target": "Yes. Water is wet."}]}', r"example 0 has no .*target_scores"),
    ],
)
def test_a_truncated_or_foreign_strategyqa_file_is_named(tmp_path, monkeypatch, text, match):
    (tmp_path / "strategyqa").mkdir()
    (tmp_path / STRATEGYQA_FILE).write_text(text)
    monkeypatch.setenv("ORCHRM_DATA_DIR", str(tmp_path))
    with pytest.raises(TaskError, match=match):
        load_strategyqa(5, seed=0)
