"""The pieces of the question-reading diagnostic (``benchmarks/question_reading.py``, issue 24) that
carry logic: the swap partners, the variants' picks, and a baseline that must learn to read a
question when a word of it decides the better plan."""

from __future__ import annotations

import json
import random

import numpy as np
import pandas as pd
import pytest

from benchmarks.common.feature_baseline import (
    PLAN_FEATURES,
    PairwiseLogit,
    PairwiseMLP,
    QuestionFeatures,
    latent_features,
    latent_table,
    plan_features,
    shown_popularity,
)
from benchmarks.question_reading import derangement, pick_with_questions, summarise, target_checks

VOTE = '<agent id="a1" type="SelfConsistency" model="large" k="5"/>'
SEARCH = '<agent id="a1" type="WebSearch" queries="2" top_k="5"/>\n<agent id="a2" type="CoT" model="small"/>\n<edge from="a1" to="a2"/>'
REFLECT = '<agent id="a1" type="Reflexion" model="small" iterations="2"/>'


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_the_derangement_pairs_every_task_with_another_of_its_domain_once(seed):
    ids = [f"{d}-{i}" for d in ("math", "code", "webqa") for i in range(2 + 3 * len(d) % 7)]
    domains = [i.split("-")[0] for i in ids]
    partner = derangement(ids, domains, seed=seed)
    assert set(partner) == set(ids)
    assert all(partner[t] != t for t in ids)
    assert all(partner[t].split("-")[0] == t.split("-")[0] for t in ids)
    assert sorted(partner.values()) == sorted(ids)  # a permutation: every task is some task's partner once
    assert derangement(ids, domains, seed=seed) == partner


def test_the_derangement_refuses_a_domain_with_one_task():
    with pytest.raises(ValueError, match="domain 'code' has 1 task.*raise --tasks"):
        derangement(["m1", "m2", "c1"], ["math", "math", "code"], seed=0)


def test_plan_features_count_the_agents_their_settings_and_the_shape():
    f = dict(zip(PLAN_FEATURES, plan_features(SEARCH), strict=True))
    assert (f["has.WebSearch"], f["count.CoT"], f["sink.CoT"], f["max.WebSearch.top_k"]) == (1, 1, 1, 5)
    assert (f["nodes"], f["edges"], f["depth"], f["width"], f["large_nodes"], f["has.Debate"]) == (2, 1, 2, 1, 0, 0)
    g = dict(zip(PLAN_FEATURES, plan_features(VOTE), strict=True))
    assert (g["large.SelfConsistency"], g["max.SelfConsistency.k"], g["sink_large"]) == (1, 5, 1)


def _questions(word: str, n: int, rng: random.Random) -> list[str]:
    filler = ["the", "a", "ticket", "customer", "order", "refund", "account", "shipping", "login", "invoice", "please", "help", "today"]
    return [" ".join(rng.sample(filler, 6) + [word] + rng.sample(filler, 3)) for _ in range(n)]


def _keyword_pairs(n: int, seed: int, split: str) -> pd.DataFrame:
    """Questions that say ``urgent`` want the vote, ``lookup`` ones the search; a third plan
    loses to both. The plans alone are even: only the word tells which wins."""
    rng = random.Random(seed)
    rows = []
    for word, best, other in (("urgent", VOTE, SEARCH), ("lookup", SEARCH, VOTE)):
        for q in _questions(word, n, rng):
            rows += [{"prompt": q, "chosen": best, "rejected": other}, {"prompt": q, "chosen": best, "rejected": REFLECT},
                     {"prompt": q, "chosen": other, "rejected": REFLECT}]
    return pd.DataFrame(rows).assign(domain="support", split=split)


def test_the_baseline_learns_the_word_that_decides_the_better_plan():
    train = pd.concat([_keyword_pairs(20, 0, "train"), _keyword_pairs(5, 1, "val")], ignore_index=True)
    model = PairwiseLogit(QuestionFeatures(bits=8)).fit(train)
    test = _keyword_pairs(15, 2, "test")
    r_c = model.score(list(test["prompt"]), list(test["chosen"]), domains=list(test["domain"]))
    r_r = model.score(list(test["prompt"]), list(test["rejected"]), domains=list(test["domain"]))
    assert (r_c > r_r).mean() == 1.0  # fresh questions, fresh filler: it reads the word
    # the same plans under the other word swap places: the question, not the plan, decides
    urgent = model.score(["please help urgent today"] * 2, [VOTE, SEARCH], domains=["support"] * 2)
    lookup = model.score(["please help lookup today"] * 2, [VOTE, SEARCH], domains=["support"] * 2)
    assert urgent[0] > urgent[1] and lookup[1] > lookup[0]


def test_a_baseline_that_reads_only_the_domain_cannot_tell_the_questions_apart():
    train = _keyword_pairs(20, 0, "train")
    model = PairwiseLogit(QuestionFeatures(question_features=False, ngrams=False), l2=1e-2).fit(train)
    urgent = model.score(["urgent"] * 2, [VOTE, SEARCH], domains=["support"] * 2)
    lookup = model.score(["lookup"] * 2, [VOTE, SEARCH], domains=["support"] * 2)
    assert np.allclose(urgent, lookup)


def test_a_latent_baseline_reads_what_the_text_hides():
    """The better plan follows a hidden property of each question that no word of it shows: the
    n-gram baseline cannot learn it, the one given the latent feature does."""
    rng = random.Random(0)
    rows, latent = [], {}
    for i in range(60):
        q = f"case {rng.randrange(10**9)} please help"
        hard = i % 2 == 0
        latent[q] = {"hard": float(hard)}
        best, other = (VOTE, SEARCH) if hard else (SEARCH, VOTE)
        rows += [{"prompt": q, "chosen": best, "rejected": other, "split": "train" if i < 48 else "test"}]
    pairs = pd.DataFrame(rows).assign(domain="support")
    model = PairwiseLogit(QuestionFeatures(question_features=False, ngrams=False, latent=True), latent=latent, l2=1e-3).fit(pairs)
    test = pairs[pairs["split"] == "test"]
    margin = (model.score(list(test["prompt"]), list(test["chosen"]), domains=list(test["domain"]))
              - model.score(list(test["prompt"]), list(test["rejected"]), domains=list(test["domain"])))
    assert (margin > 0).all()
    text = PairwiseLogit(QuestionFeatures(question_features=False), l2=1e-3).fit(pairs)
    text_margin = (text.score(list(test["prompt"]), list(test["chosen"]), domains=list(test["domain"]))
                   - text.score(list(test["prompt"]), list(test["rejected"]), domains=list(test["domain"])))
    assert not (text_margin > 0).all()  # the words say nothing of it
    with pytest.raises(KeyError, match="no latent features"):
        model.score(["a question never described"], [VOTE], domains=["support"])
    with pytest.raises(ValueError, match="needs latent="):
        PairwiseLogit(QuestionFeatures(latent=True))


def test_the_mlp_reader_learns_an_interaction_the_bilinear_one_cannot():
    """The better plan depends on two hidden properties together (one or the other, not both: an
    exclusive or): bilinear in the question's features, a plan's reward is linear in them and cannot
    follow it; the MLP on the same features does."""
    rng = random.Random(1)
    rows, latent = [], {}
    for i in range(240):
        q = f"case {rng.randrange(10**9)} please help"
        a, b = rng.random() < 0.5, rng.random() < 0.5
        latent[q] = {"a": float(a), "b": float(b)}
        best, other = (VOTE, SEARCH) if a != b else (SEARCH, VOTE)
        rows.append({"prompt": q, "chosen": best, "rejected": other, "split": "train" if i < 160 else "val" if i < 200 else "test"})
    pairs = pd.DataFrame(rows).assign(domain="support")
    test = pairs[pairs["split"] == "test"]
    features = QuestionFeatures(question_features=False, ngrams=False, latent=True)

    def accuracy(model):
        args = dict(domains=list(test["domain"]))
        return float((model.score(list(test["prompt"]), list(test["chosen"]), **args)
                      > model.score(list(test["prompt"]), list(test["rejected"]), **args)).mean())

    assert accuracy(PairwiseLogit(features, latent=latent).fit(pairs)) < 0.8
    mlp = PairwiseMLP(features, latent=latent).fit(pairs)
    assert accuracy(mlp) == 1.0
    assert mlp.describe()["l2"] in mlp.val_loss and mlp.describe()["best_epoch"] >= 1


def test_latent_features_describe_every_sandbox_domain_with_one_set_of_names_per_domain():
    from orchrm.execution.sandbox.engine import SandboxBackend
    from orchrm.execution.tasks.base import load_tasks
    from orchrm.model.texts import task_text

    backend = SandboxBackend()
    tasks = [t for d in ("math", "code", "multihop", "webqa") for t in load_tasks(d, 6, seed=3)]
    one = {t.domain: latent_features(t, backend) for t in tasks}
    assert 0 < one["math"]["p_ok.small"] <= one["math"]["p_ok.large"] <= 1  # the simulator's own difficulty
    assert "trap_strength" in one["code"] and "n_statements" in one["code"]
    assert any(k.startswith("popularity=") for k in one["webqa"]) and any(k.startswith("popularity=") for k in one["multihop"])
    assert all(np.isfinite(v) for f in one.values() for v in f.values())
    table = latent_table(tasks, backend)
    assert set(table) == {task_text(t.question) for t in tasks}  # the question as a prompt gives it (code: no trailing newline)
    for d in ("math", "code", "multihop", "webqa"):
        names = {tuple(table[task_text(t.question)]) for t in tasks if t.domain == d}
        assert len(names) == 1  # every task of a domain: the same names, a missing count 0


def test_the_views_of_the_latent_description_keep_less_of_the_entities_popularity():
    """``all`` counts every hop's subject of a multihop question, ``named`` the one the question
    names, ``shown`` that one as its name shows it; the other features are the same in every view."""
    from orchrm.execution.sandbox.engine import SandboxBackend
    from orchrm.execution.tasks.base import load_tasks

    backend = SandboxBackend()
    for task in load_tasks("multihop", 8, seed=5):
        state = backend.domain(task).state(task)
        views = {v: latent_features(task, backend, v) for v in ("all", "named", "shown")}
        pops = {v: {k: x for k, x in f.items() if k.startswith("popularity=")} for v, f in views.items()}
        assert sum(pops["all"].values()) == len(state.hops)
        named = state.world.entities[state.hops[0][0]]
        assert named.name in task.question and pops["named"] == {f"popularity={named.popularity}": 1.0}
        shown = shown_popularity(named.name, named.type)
        assert pops["shown"] == ({f"popularity={shown}": 1.0} if shown else {})
        rest = [{k: x for k, x in f.items() if not k.startswith("popularity=")} for f in views.values()]
        assert rest[0] == rest[1] == rest[2]
        asked = latent_features(task, backend, asked=True)  # with each hop's relation, the rest alike
        assert {k: v for k, v in asked.items() if not k.startswith("relation=")} == views["all"]
        assert sum(v for k, v in asked.items() if k.startswith("relation=")) == len(state.hops)
    web = load_tasks("webqa", 1, seed=5)[0]
    assert web.metadata["entity"] and sum(v for k, v in latent_features(web, backend, "shown").items() if k.startswith("popularity=")) == 1
    attribute = backend.domain(web).state(web).asked
    assert set(latent_features(web, backend, asked=True)) - set(latent_features(web, backend)) == {f"asked={attribute}"}
    math_task = load_tasks("math", 1, seed=5)[0]
    assert latent_features(math_task, backend, asked=True) == latent_features(math_task, backend)  # math asks no category
    with pytest.raises(ValueError, match="choose one of all, named, shown"):
        latent_features(web, backend, "everything")
    with pytest.raises(ValueError, match="latent_view 'everything'"):
        QuestionFeatures(latent=True, latent_view="everything")


def test_a_name_shows_its_entitys_popularity_about_as_often_as_the_naming_rules_make_it_follow():
    """A name is drawn in its entity's popularity style four times in five, else in a style drawn
    at random (so 13 in 15 names match); reading the style back recovers about that share, and
    every style is read where the name shows one."""
    from collections import Counter

    from orchrm.execution.tasks.multihop import build_world

    seen = Counter()
    for e in build_world().entities.values():
        if e.twin_of is None and e.type != "country":
            seen[shown_popularity(e.name, e.type) == e.popularity] += 1
    assert 0.8 < seen[True] / sum(seen.values()) < 0.92
    assert shown_popularity("Vorland", "country") is None
    assert {shown_popularity(n, "city") for n in ("Upper Kela-on-Doru", "Port Mira", "Zo")} == {"obscure", "known", "famous"}


def _pool(tasks: int) -> pd.DataFrame:
    """Two domains of ``tasks`` tasks, three candidates each; on task ``i`` of a domain the plan
    ``plan{i % 3}`` is the expected best (1.0, the others 0.2): a task's question names it."""
    rows = []
    for domain in ("math", "webqa"):
        for i in range(tasks):
            for c in range(3):
                rows.append({"pool_seed": 0, "task_id": f"{domain}{i}", "domain": domain, "question": f"use plan{i % 3}",
                             "candidate": c, "plan_id": f"p{c}", "plan_text": f"plan{c}", "plan_chars": 5, "answer": None,
                             "answer_key": None, "quality": 0.0, "confidence": 0.0, "tokens": 10 + c, "cost": float(c),
                             "expected_quality": 1.0 if c == i % 3 else 0.2, "expected_cost": float(c)})
    return pd.DataFrame(rows)


def reads(questions, plans, domains):
    """A scorer that reads the question of a :func:`_pool`: the plan the question names scores 1."""
    return np.array([float(q.endswith(p)) for q, p in zip(questions, plans, strict=True)])


def test_a_scorer_that_reads_the_question_loses_its_pick_when_the_question_is_swapped():
    frame = _pool(3)
    partner = derangement(frame["task_id"], frame["domain"], seed=0)
    t = pick_with_questions(reads, frame, [partner])
    assert (t["own"] == 1.0).all() and (t["expected_oracle"] == 1.0).all()
    assert (t["swapped"] == 0.2).all() and (t["pick_changed"] == 1.0).all()  # every partner names another plan
    no_question = t["task_id"].map(lambda tid: 1.0 if int(tid[-1]) % 3 == 0 else 0.2)  # no question: the first candidate
    assert (t["plan_only"] == no_question).all()
    rows = {r["domain"]: r for r in summarise(t, bootstrap=50, seed=0)}
    assert rows["all"]["swap_cost"]["mean"] == pytest.approx(0.8)
    assert rows["all"]["gap_closed_own"]["mean"] == pytest.approx(1.0)
    assert rows["all"]["gap_closed_swapped"]["mean"] == pytest.approx(-0.5)  # (0.2 - 0.4667) / (1 - 0.4667)


def test_the_swapped_pick_is_the_mean_over_derangements_and_each_derangements_cost_is_kept():
    frame = _pool(4)
    frame = frame[frame["domain"] == "math"].reset_index(drop=True)  # math0 and math3 both ask for plan0
    # the first pairs math0 with math3 (the same question: the pick stands), the second a cycle
    first = {"math0": "math3", "math3": "math0", "math1": "math2", "math2": "math1"}
    second = {"math0": "math1", "math1": "math2", "math2": "math3", "math3": "math0"}
    t = pick_with_questions(reads, frame, [first, second]).set_index("task_id")
    assert t[["swapped_0", "swapped_1"]].to_dict("index") == {
        "math0": {"swapped_0": 1.0, "swapped_1": 0.2}, "math1": {"swapped_0": 0.2, "swapped_1": 0.2},
        "math2": {"swapped_0": 0.2, "swapped_1": 0.2}, "math3": {"swapped_0": 1.0, "swapped_1": 1.0}}
    assert t["swapped"].to_dict() == pytest.approx({"math0": 0.6, "math1": 0.2, "math2": 0.2, "math3": 1.0})
    assert t["pick_changed"].to_dict() == {"math0": 0.5, "math1": 1.0, "math2": 1.0, "math3": 0.0}
    row = {r["domain"]: r for r in summarise(t.reset_index(), bootstrap=0, seed=0)}["all"]
    assert row["swap_cost_by_derangement"] == pytest.approx([0.4, 0.6])
    assert row["swap_cost"]["mean"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="swap seed"):
        pick_with_questions(reads, frame, [])


def test_the_targets_are_read_off_the_summary_per_domain():
    frame = _pool(3)
    partner = derangement(frame["task_id"], frame["domain"], seed=0)
    checks = target_checks(summarise(pick_with_questions(reads, frame, [partner]), bootstrap=0, seed=0))
    assert checks["swap_cost_points"] == pytest.approx(80.0) and checks["swap_met"]
    assert set(checks["per_domain"]) == {"math", "webqa"}
    # cost-only takes the priciest plan (candidate 2), right on a third of the tasks: the reader beats it
    assert all(c["over_cost_only"] and c["gap_closed"] for c in checks["per_domain"].values())
    assert checks["met"] == all(c["over_length_only"] for c in checks["per_domain"].values())


def test_the_rule_scorer_reads_the_question_it_is_shown():
    from benchmarks.question_reading import rule_scorer

    trap = "What is the country in which the city where the company that employs Fumron Lum was headquartered before it relocated lies?"
    plain = "What is the country in which the city where the company that employs Fumron Lum is headquartered lies?"
    large = '<agent id="a1" type="CoT" model="large"/>'
    vote = '<agent id="a1" type="SelfConsistency" model="small" k="5"/>'
    score = rule_scorer(["multihop"] * 4 + ["no-such-domain"])
    r = score([trap, trap, plain, plain, trap], [large, vote, large, vote, large], [None] * 5)
    # a trap phrasing is misread alike by every vote of a small model: the rule wants the large tier there
    assert r[0] - r[1] > r[2] - r[3]
    assert r[4] == 0.0  # a domain without a rule scores every plan alike
    with pytest.raises(ValueError, match="5 rows of its pool frame, not 2"):
        score([trap, plain], [large, vote], [None, None])


def test_the_seed_ensemble_is_an_orchrm_ensemble_of_the_seed_models_standardised_rewards():
    import torch

    from benchmarks.question_reading import ensemble_of
    from orchrm import BradleyTerryModel, Trainer
    from orchrm.errors import ConfigError
    from tests.model.conftest import make_pairs

    pairs = make_pairs(16, seed=3)
    pairs.loc[pairs["task_id"].isin(sorted(set(pairs["task_id"]))[:3]), "split"] = "val"  # every seed fits one tokenizer
    tiny = dict(hidden_dim=32, num_layers=1, num_heads=2, max_length=96, vocab_size=300, dropout=0.0)
    models = []
    for seed in (0, 1):
        model = BradleyTerryModel(**tiny, seed=seed)
        Trainer(model=model, seed=seed, batch_size=16, lr=3e-3, epochs=2, progress=False).train(pairs)
        models.append(model)
    ensemble = ensemble_of(models)
    prompts, actions = list(pairs["prompt"][:12]), list(pairs["chosen"][:12])
    standardised = [(m.score(prompts, actions) - m.reward_mean) / m.reward_std for m in models]
    assert ensemble.members == 2
    torch.testing.assert_close(ensemble.score(prompts, actions), (standardised[0] + standardised[1]) / 2, atol=1e-5, rtol=1e-5)
    # a model that read other texts (another split) fitted another tokenizer: refused, not mixed in
    other = BradleyTerryModel(**tiny, seed=1)
    Trainer(model=other, seed=1, batch_size=16, lr=3e-3, epochs=1, progress=False).train(make_pairs(6, seed=9))
    with pytest.raises(ConfigError, match="another tokenizer"):
        ensemble_of([models[0], other])


def test_the_question_share_splits_rewards_into_what_the_own_question_adds_and_what_the_plan_gets():
    from benchmarks.ensemble_reading import agreement, centred_rewards, question_share

    frame = _pool(3)
    # the two cycles of each domain's three tasks: a task's two partners name the task's two other plans
    partners = [{f"{d}{i}": f"{d}{(i + step) % 3}" for d in ("math", "webqa") for i in range(3)} for step in (1, 2)]
    prior = lambda questions, plans, domains: np.array([float(p[-1]) for p in plans])  # noqa: E731  the plan alone
    own, plan = centred_rewards(prior, frame, partners)
    assert question_share(own, plan) == 0.0 and np.allclose(own, plan)
    # reading the question: the partners' questions name the other two plans, so their mean gives the own plan
    # -1/3 and the others +1/6 each; the own question adds +1 and -1/2, -1/2 (|question|^2 1.5, |plan|^2 1/6)
    own, plan = centred_rewards(reads, frame, partners)
    assert own[:3] == pytest.approx([2 / 3, -1 / 3, -1 / 3])
    assert plan[:3] == pytest.approx([-1 / 3, 1 / 6, 1 / 6])
    assert question_share(own, plan) == pytest.approx(1.5 / (1.5 + 1 / 6))
    # two members with the same plan prior that read the question in opposite ways: their mean reads nothing
    a = lambda q, p, d: prior(q, p, d) + reads(q, p, d)  # noqa: E731
    b = lambda q, p, d: prior(q, p, d) - reads(q, p, d)  # noqa: E731
    parts = {"a": centred_rewards(a, frame, partners), "b": centred_rewards(b, frame, partners)}
    (row,) = agreement(parts)
    assert row["members"] == ["a", "b"] and row["question_correlation"] == pytest.approx(-1.0)
    assert row["plan_correlation"] == pytest.approx(11 / 13)  # prior +- the partners' mean: they agree on the prior alone
    mean = lambda q, p, d: (a(q, p, d) + b(q, p, d)) / 2  # noqa: E731
    assert question_share(*centred_rewards(mean, frame, partners)) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="no within-task reward spread"):
        question_share(np.zeros(3), np.zeros(3))


def test_the_predicted_ensemble_share_is_what_the_mean_of_three_members_measures():
    from benchmarks.ensemble_reading import kept_by_mean, predicted_share, question_share

    rng = np.random.default_rng(0)
    n, rho_q, rho_p, reading = 200_000, 0.6, 0.95, 0.7  # each member's question part has 0.7 of its plan part's spread
    shared_q, shared_p = rng.standard_normal(n), rng.standard_normal(n)
    members = []
    for _ in range(3):
        plan = np.sqrt(rho_p) * shared_p + np.sqrt(1 - rho_p) * rng.standard_normal(n)
        question = reading * (np.sqrt(rho_q) * shared_q + np.sqrt(1 - rho_q) * rng.standard_normal(n))
        members.append((plan + question, plan))
    member_share = reading**2 / (1 + reading**2)
    assert np.mean([question_share(own, plan) for own, plan in members]) == pytest.approx(member_share, abs=0.005)
    mean_own, mean_plan = (np.mean([m[i] for m in members], axis=0) for i in (0, 1))
    predicted = predicted_share(member_share, kept_by_mean(rho_q, 3), kept_by_mean(rho_p, 3))
    assert predicted < member_share - 0.05  # the members agree on the plan more: the mean thins out the question
    assert question_share(mean_own, mean_plan) == pytest.approx(predicted, abs=0.005)


def test_a_remembered_scorer_scores_each_distinct_call_once():
    from benchmarks.ensemble_reading import remembered

    calls = []

    def scorer(questions, plans, domains):
        calls.append(list(questions))
        return np.array([len(q) + len(p) for q, p in zip(questions, plans, strict=True)], dtype=float)

    once = remembered(scorer)
    first = once(["a", "bb"], ["p", "q"], ["math", "math"])
    first[0] = -1.0  # a caller's edit does not reach the remembered rewards
    again = once(["a", "bb"], ["p", "q"], ["math", "math"])
    other = once(["bb", "a"], ["p", "q"], ["math", "math"])
    once(["a", "bb"], ["q", "p"], ["math", "math"])  # other plans
    once(["a", "bb"], ["p", "q"], ["code", "math"])  # other domains
    assert calls == [["a", "bb"], ["bb", "a"], ["a", "bb"], ["a", "bb"]]
    assert list(again) == [2.0, 3.0] and list(other) == [3.0, 2.0]


def test_the_pool_is_held_out_from_the_largest_collection_and_never_from_a_smaller_one():
    from benchmarks.question_reading import pool_collection

    assert pool_collection([200, 50, 100, 400]) == 400
    assert pool_collection([200, 50], 400) == 400  # a --curve 200 ablation on the full run's pool
    assert pool_collection([200], 200) == 200
    with pytest.raises(ValueError, match=r"--held-out-from 100 is below the largest collection .*\(400 tasks"):
        pool_collection([200, 400], 100)


@pytest.mark.parametrize("module", ["benchmarks.question_reading", "benchmarks.ensemble_reading"])
def test_a_pool_held_out_from_too_small_a_collection_is_a_usage_error_naming_the_flag(module, capsys, monkeypatch, tmp_path):
    import importlib

    monkeypatch.setenv("ORCHRM_DATA_DIR", str(tmp_path))  # set, so main leaves the environment as it was
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(module).main(["--held-out-from", "100", "--out", "unused"])
    assert exit_.value.code == 2
    assert "error: --held-out-from 100 is below the largest collection this run trains on" in capsys.readouterr().err


@pytest.mark.parametrize(("own", "swapped", "says"), [
    (-0.001, 0.013, "mostly a wrong question misleading it less"),
    (-0.03, 0.005, "helped the members pick with the right question"),
    (0.01, -0.004, "own question and -0.4 points [-1.4, +0.6] with a swapped one."),
])
def test_the_ensemble_page_says_which_side_of_the_swap_cost_the_mean_moved(own, swapped, says):
    from benchmarks.render.ensemble_reading import verdict
    from benchmarks.render.records import Record

    def d(x):
        return {"mean": x, "ci_low": x - 0.01, "ci_high": x + 0.01}

    res = Record({"mean_question_correlation": 0.6, "mean_plan_correlation": 0.95, "kept_by_mean": {"question": 0.73, "plan": 0.97},
                  "settings": {"model_seeds": [0, 1, 2]}, "members_mean_question_share": 0.27, "predicted_ensemble_question_share": 0.22,
                  "models": [{"model": "seed 0", "question_share": 0.3}, {"model": "ensemble", "question_share": 0.21}],
                  "ensemble_minus_members_mean": {"own": d(own), "swapped": d(swapped)}}, "ensemble_reading.json")
    text = " ".join(verdict(res))
    assert "agree on the plan (mean correlation 0.95) more than on the question (0.60)" in text
    assert "would be 0.220; it measures 0.210" in text
    assert says in text
    others = {"mostly a wrong question misleading it less", "helped the members pick with the right question"} - {says}
    assert not any(o in text for o in others)


def test_a_results_file_records_the_cpu_kernels_torch_dispatched_to_beside_the_cpu_model():
    import torch

    from benchmarks.common.results_io import provenance

    recorded = provenance("python -m benchmarks.question_reading", torch_threads=1)["machine"]
    assert recorded["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability() != ""
    assert recorded["torch_threads"] == 1 and recorded["cpus"] >= 1


@pytest.mark.parametrize(("latent_cost", "says"), [
    (0.06, "a reader of the task's latent description does (MLP (domain, the sandbox's latent task description), seed 1 +6.0"),
    (0.0, "the information runs out in the pairs, not in the model"),
])
def test_the_question_reading_page_says_the_text_runs_out_where_a_latent_reader_still_learns(latent_cost, says):
    from benchmarks.render.question_reading import verdict
    from benchmarks.render.records import Record

    def d(x):
        return {"mean": x, "ci_low": x - 0.01, "ci_high": x + 0.01}

    def row(scorer, domain, swap, own=0.8):
        return {"scorer": scorer, "domain": domain, "own": d(own), "swap_cost": d(swap)}

    rows = [row(s, dom, 0.0) for s in ("reward_model", "logreg", "logreg_latent", "mlp_latent", "mlp") for dom in ("multihop", "all")]
    rows += [row("mlp_latent.seed1", "multihop", latent_cost), row("mlp_latent.seed1", "all", 0.03, own=0.83)]
    res = Record({"rows": rows, "curve": [], "settings": {"collection_tasks_per_domain": 200}, "references": [{"domain": dom, "question_worth": d(0.18)} for dom in ("multihop", "all")],
                  "baseline_minus_reward_model": [{"scorer": "logreg", "domain": dom, "own": d(0.0)} for dom in ("multihop", "all")]},
                 "question_reading.json")
    text = " ".join(verdict(res))
    assert says in text
    assert "A perfect reader that is not linear** (MLP (domain, the sandbox's latent task description), 2 seed(s))" in text
    assert "(mean +1.5); it picks 0.800 [0.79, 0.81] / 0.830 [0.82, 0.84]. The same MLP on the text: +0.0" in text


def test_the_question_reading_page_lays_out_what_the_text_shows_from_all_of_the_latent_description_down_to_the_text():
    from benchmarks.common.results_io import RESULTS
    from benchmarks.render.question_reading import page, text_shows
    from benchmarks.render.records import Record

    def d(x):
        return {"mean": x, "ci_low": x - 0.01, "ci_high": x + 0.01}

    swap = {"logreg_latent": 0.06, "logreg_named": 0.05, "logreg_shown": 0.03, "logreg_text_shown": 0.01, "logreg": 0.0,
            "mlp_latent": 0.04, "mlp_latent.seed1": 0.02, "mlp_named": 0.03, "mlp_shown": 0.01, "mlp": 0.0, "reward_model": 0.0}
    rows = [{"scorer": s, "domain": dom, "own": d(0.8), "swap_cost": d(x)} for s, x in swap.items() for dom in ("multihop", "all")]

    def shows(rows):
        return text_shows(Record({"rows": rows, "references": [{"domain": dom} for dom in ("multihop", "all")]}, "question_reading.json"))

    table = [line for line in shows(rows) if line.startswith("| `")]
    assert table == ["| `logreg_latent` | its latent description | +6.0 | +6.0 |",
                     "| `logreg_named` | the same, of the entities' popularity only the named one's | +5.0 | +5.0 |",
                     "| `logreg_shown` | the same, that popularity as the name shows it | +3.0 | +3.0 |",
                     "| `logreg_text_shown` | the text, and that reading of the name | +1.0 | +1.0 |",
                     "| `logreg` | the text | +0.0 | +0.0 |",
                     "| `mlp_latent` | its latent description | +3.0 | +3.0 |",  # an MLP: the mean of its seeds
                     "| `mlp_named` | the same, of the entities' popularity only the named one's | +3.0 | +3.0 |",
                     "| `mlp_shown` | the same, that popularity as the name shows it | +1.0 | +1.0 |",
                     "| `mlp` | the text | +0.0 | +0.0 |"]
    assert shows(rows)[-1] == "| reward model | the text | +0.0 | +0.0 |"
    assert shows([r for r in rows if "shown" not in r["scorer"]]) == []
    # the measured file's page holds the table under its own heading
    measured = Record(json.loads((RESULTS / "ablations" / "named_shown.json").read_text()), "named_shown.json")
    lines = page(measured)
    at = lines.index("## What the text shows of the task")
    assert lines[at + 4:at + 6] == text_shows(measured)[2:4] and "| `logreg_shown` |" in "\n".join(lines[at:])
