"""evaluate() end to end: a tiny trained model on the tiny config's held-out pool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchrm.config import load_config
from orchrm.evaluation.gates import check_gates
from orchrm.evaluation.harness import evaluate
from orchrm.evaluation.pool import build_pool
from orchrm.evaluation.selectors import SELECTORS

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.fixture(scope="module")
def tiny_config():
    return load_config(CONFIGS / "tiny.yaml")


@pytest.fixture(scope="module")
def pool(tiny_config):
    return build_pool(tiny_config, progress=False, workers=1)


@pytest.fixture(scope="module")
def report(trained_model, pairs, pool, tiny_config):
    return evaluate(trained_model, pairs=pairs, pool=pool, config=tiny_config.evaluate, champion=trained_model)


def test_the_report_has_every_contract_metric(report, tiny_config):
    m = report.metrics
    for key in ("pairwise_accuracy", "bt_loss", "ece", "reward_mean", "reward_std", "gap_closed", "scoring_latency_ms_p50"):
        assert key in m, key
    for n in tiny_config.evaluate.best_of:
        for selector in SELECTORS:
            assert 0.0 <= m[f"best_of_{n}.{selector}"] <= 1.0
            assert m[f"tokens.best_of_{n}.{selector}"] >= 0
            for domain in tiny_config.collect.domains:
                assert f"best_of_{n}.{selector}.{domain}" in m
    assert m["tokens_scoring.best_of_4.reward_model"] > 0
    # the reward model executes one plan; the vote executes all four
    assert m["tokens.best_of_4.reward_model"] < m["tokens.best_of_4.majority_vote"]
    assert m["best_of_4.oracle"] >= max(m[f"best_of_4.{s}"] for s in SELECTORS if s != "oracle")


def test_pairwise_accuracy_is_on_the_held_out_split_only(report, pairs):
    table = report.tables["pairwise"]
    overall = table[(table.granularity == "all") & (table.domain == "all")].iloc[0]
    assert overall.pairs == (pairs.split == "test").sum()
    assert report.metrics["pairwise_accuracy"] > 0.7  # the fixture's rule is easy to learn


def test_the_champion_is_scored_on_the_same_pool_and_a_tie_keeps_it(report, tiny_config):
    assert report.champion_metrics is not None
    key = "expected.best_of_4.reward_model"
    assert report.champion_metrics[key] == report.metrics[key]
    # the same model: the paired difference is 0 on every task, so its interval is [0, 0]
    delta = "champion_delta.expected.best_of_4"
    assert report.metrics[delta] == report.metrics[f"{delta}.ci_low"] == report.metrics[f"{delta}.ci_high"] == 0.0
    verdict = check_gates(report.metrics, tiny_config.evaluate.gates, champion=report.champion_metrics)
    assert "beats_champion" in {g.name for g in verdict.failed()}


def test_write_gives_json_csv_tables_and_png_plots_that_regate_alike(report, tiny_config, tmp_path):
    paths = report.write(tmp_path)
    for name in ("quality_vs_n", "quality_vs_tokens", "reliability"):
        assert paths[name].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in ("pairwise", "calibration", "best_of_n", "gap_closed", "latency"):
        assert paths[name].suffix == ".csv" and paths[name].stat().st_size > 0
    stored = json.loads(paths["metrics"].read_text())
    gates = tiny_config.evaluate.gates
    assert check_gates(stored["metrics"], gates, champion=stored["champion_metrics"]) == check_gates(
        report.metrics, gates, champion=report.champion_metrics
    )
    assert "best-of-4" in report.summary()
    assert "## Gap closed at N = 4" in report.to_markdown()


def test_without_held_out_pairs_only_best_of_n_is_measured_and_the_pairwise_gate_says_so(trained_model, pairs, pool, tiny_config):
    report = evaluate(trained_model, pairs=pairs.iloc[:0], pool=pool, config=tiny_config.evaluate)
    assert "pairwise_accuracy" not in report.metrics and "best_of_4.reward_model" in report.metrics
    verdict = check_gates(report.metrics, tiny_config.evaluate.gates)
    assert "pairwise_accuracy missing from the metrics" in verdict.failed()[0].detail
    assert "best-of-4" in report.summary()
