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
def test_demo_runs_the_whole_pipeline_on_the_tiny_config(tmp_path):
    from orchrm.demo import run_demo

    lines: list[str] = []
    result = run_demo(ROOT / "configs" / "tiny.yaml", out_dir=tmp_path, say=lines.append)
    text = "\n".join(lines)
    for stage in ("1/6 collect", "2/6 validate artifacts", "3/6 build win/loss pairs", "4/6 validate pairs", "5/6 train", "6/6 evaluate"):
        assert stage in text
    assert result.artifacts > 0 and result.pairs > 0
    for name in ("artifacts.parquet", "pairs.parquet", "model.safetensors"):
        assert (tmp_path / name).is_file()
    assert (tmp_path / "validation" / "pairs").is_dir()
    assert "executed only the best" in text
