"""The pipeline end to end: the write-up's API as written, and the demo on the tiny config."""

from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_design_section_12_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from orchrm import BradleyTerryModel, MultiAgentExecutor, PairwiseComparator, Trainer

    def evaluate_quality(artifact) -> float:
        """A user's own quality function (the sandbox cannot grade an integral): cheaper is better."""
        return max(0.0, 1.0 - artifact["cost"] / 5000)

    executor = MultiAgentExecutor(agents=["math_parser", "strategy_selector", "calculator"], orchestrator="default")
    artifacts = executor.run(task="Solve: integral of x^2 from 0 to 1")
    comparator = PairwiseComparator(quality_fn=evaluate_quality)
    win_loss_pairs = comparator.build_pairs(artifacts)
    assert len(win_loss_pairs) > 0

    model = BradleyTerryModel(hidden_dim=256, num_layers=3, lr=1e-4)
    trainer = Trainer(model=model, batch_size=32)
    trainer.train(pairs=win_loss_pairs, epochs=10, eval_interval=1)
    model.save("orchrm_reward_model.pt")

    loaded = BradleyTerryModel.load("orchrm_reward_model.pt")
    texts = list(win_loss_pairs.chosen)
    assert loaded.score(list(win_loss_pairs.prompt), texts).tolist() == model.score(list(win_loss_pairs.prompt), texts).tolist()


@pytest.mark.slow
def test_demo_runs_the_pipeline_then_the_champion_picks_a_plan(tmp_path):
    import yaml

    from orchrm.config import config_from_dict
    from orchrm.demo import run_demo

    data = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text()) | {"data_dir": str(tmp_path / "data")}
    # gates a two-epoch tiny model can pass: this test is about the demo, not the model's skill
    gates = {"min_pairwise_accuracy": 0.0, "min_best_of_n_gain": -1.0, "beat_cost_only": False, "max_scoring_latency_ms": 1e9}
    data["evaluate"] = {**data.get("evaluate", {}), "gates": {**data.get("evaluate", {}).get("gates", {}), **gates}}
    lines: list[str] = []
    result = run_demo(config_from_dict(data), out_dir=tmp_path / "run", say=lines.append)
    text = "\n".join(lines)
    for stage in ("1/8 collect", "2/8 validate artifacts", "3/8 build win/loss pairs", "4/8 validate pairs", "5/8 train",
                  "6/8 evaluate", "7/8 gates", "8/8 register"):
        assert stage in text
    for name in ("pairs.parquet", "model/model.safetensors", "validation/pairs", "evaluation"):
        assert (tmp_path / "run" / name).exists(), name
    assert result.pipeline.status == "promoted"  # the first candidate has no champion to beat
    assert result.example is not None and "executed only the best" in text
    assert f"verdict: {result.pipeline.status}" in text and "champion: version 1" in text
    assert "ui --backend-store-uri sqlite:///" in text and "server start" in text
