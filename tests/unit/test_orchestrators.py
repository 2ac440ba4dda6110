import random
from collections import Counter

import pytest

from orchrm.execution.collect import allocate, plans_for_task
from orchrm.execution.samplers import (
    BaseSampler,
    PanelSampler,
    RoleSampler,
    SpecializedSampler,
    get_sampler,
    sample_prior_plan,
)
from orchrm.execution.tasks.base import Task
from orchrm.execution.tasks.router import route, task_from_text

TASK = Task("t1", "math", "Natalia sold 48 clips in April and half as many in May. How many in total?")


def test_base_sampler_is_seeded_and_distinct():
    a = BaseSampler().sample(TASK, 8, random.Random(0))
    b = BaseSampler().sample(TASK, 8, random.Random(0))
    assert [p.plan_id for p in a] == [p.plan_id for p in b]
    assert len({p.plan_id for p in a}) == 8


def test_base_prior_is_broad():
    rng = random.Random(1)
    shapes = Counter(sample_prior_plan(rng).shape() for _ in range(2000))
    tiers = Counter(t for _ in range(500) for t in sample_prior_plan(rng).tiers_used())
    assert len(shapes) >= 12
    assert max(shapes.values()) / 2000 < 0.2
    assert tiers["small"] > 0 and tiers["large"] > 0


def test_specialized_sampler_is_seeded():
    a = SpecializedSampler().sample(TASK, 4, random.Random(3))
    b = SpecializedSampler().sample(TASK, 4, random.Random(3))
    assert [p.plan_id for p in a] == [p.plan_id for p in b] and len(a) == 4


def test_panel_plans_are_shared_by_the_tasks_of_a_domain():
    other = Task("t2", "math", "A gross of pencils is split among 12 pupils. How many does each get?")
    webqa = Task("t3", "webqa", "Which river flows through Vienna?")
    panel = {p.plan_id for p in PanelSampler().panel("math")}
    assert len(panel) == 16
    drawn = [
        {p.plan_id for name, p in plans_for_task(task, 8, seed, {"panel": 0.5, "specialized": 0.5}) if name == "panel"}
        for task in (TASK, other)
        for seed in (0, 1)
    ]
    assert all(len(d) == 4 and d <= panel for d in drawn)
    assert len(set().union(*drawn)) > 4  # each task draws its own four of the sixteen
    assert panel != {p.plan_id for p in PanelSampler().panel("webqa")}  # every domain has a panel of its own
    assert {p.plan_id for p in PanelSampler().sample(webqa, 4, random.Random(0))} <= {p.plan_id for p in PanelSampler().panel("webqa")}


def test_role_sampler_uses_only_the_roles_and_ends_with_the_last():
    plans = RoleSampler(["math_parser", "strategy_selector", "calculator"]).sample(TASK, 6, random.Random(0))
    assert len(plans) == 6
    for p in plans:
        assert {n.role for n in p.nodes} <= {"math_parser", "strategy_selector", "calculator"}
        assert p.node(p.sink).role == "calculator"


def test_unknown_role_and_orchestrator_are_named():
    with pytest.raises(ValueError, match="unknown agent role 'wizard'"):
        RoleSampler(["wizard"])
    with pytest.raises(ValueError, match="unknown orchestrator 'oracle'; use base, panel, specialized"):
        get_sampler("oracle")


@pytest.mark.parametrize(("n", "shares", "expected"), [(8, {"base": 0.5, "specialized": 0.5}, {"base": 4, "specialized": 4}), (5, {"base": 1, "specialized": 1}, {"base": 3, "specialized": 2}), (3, {"base": 1.0}, {"base": 3})])
def test_allocate_splits_plans_by_share(n, shares, expected):
    assert allocate(n, shares) == expected


def test_plans_for_task_labels_samplers_and_never_repeats_a_plan():
    got = plans_for_task(TASK, 8, 0, {"base": 0.5, "specialized": 0.5})
    assert len(got) == 8
    assert len({p.plan_id for _, p in got}) == 8
    assert Counter(name for name, _ in got) == {"base": 4, "specialized": 4}


@pytest.mark.parametrize(
    ("question", "domain"),
    [
        ("Write a Python function that reverses a list.", "code"),
        ("def add(a, b):\n    '''Return a + b.'''", "code"),
        ("Solve: integral of x^2 from 0 to 1", "math"),
        ("How many apples are left if Tom eats 3 of 10?", "math"),
        ("In which country was the director of the film that won the award born?", "multihop"),
        ("Answer: what is the capital of France?", "webqa"),
    ],
)
def test_router_reads_the_text(question, domain):
    assert route(question) == domain


def test_unparseable_free_text_becomes_a_generic_task():
    task = task_from_text("Answer: what is the capital of France?")
    assert task.metadata["generic"] is True and task.reference is None
    assert task.task_id == task_from_text("Answer: what is the capital of France?").task_id


def test_each_builtin_domain_declares_the_heuristic_the_specialized_sampler_reads():
    from orchrm.execution.tasks import BUILTIN_DOMAINS, plan_heuristic
    from orchrm.execution.tasks.math import heuristic_plan_score, question_features

    assert all(plan_heuristic(domain) is not None for domain in BUILTIN_DOMAINS)
    math = plan_heuristic("math")
    assert math.features is question_features and math.score is heuristic_plan_score
    assert plan_heuristic("no-such-domain") is None


def test_a_users_domain_declares_its_heuristic_and_the_specialized_sampler_follows_it():
    from orchrm.execution.tasks import DomainHeuristic, register_heuristic

    desk = Task("desk-1", "heuristic-test-desk", "My invoice shows a charge I did not make.")
    before = SpecializedSampler(temperature=0.0).sample(desk, 4, random.Random(0))
    assert before == BaseSampler().sample(desk, 48, random.Random(0))[:4]  # no heuristic: the prior's first draws
    register_heuristic(
        "heuristic-test-desk",
        DomainHeuristic(features=lambda q: {"billing": float("invoice" in q)},
                        score=lambda f, plan: f["billing"] * ("WebSearch" in plan.render())),
    )
    after = SpecializedSampler(temperature=0.0).sample(desk, 4, random.Random(0))
    assert all("WebSearch" in p.render() for p in after)


def test_a_heuristic_without_features_and_score_is_refused():
    from orchrm.execution.tasks import register_heuristic

    with pytest.raises(TypeError, match=r"heuristic for domain 'x' needs callable features\(question\) and score\(features, plan\)"):
        register_heuristic("x", object())
