"""``orchrm demo`` / ``make demo``: the pipeline on the embedded sandbox, then the champion at work.

The pipeline is :func:`orchrm.ops.pipeline.run_pipeline` (``make demo`` runs it as the Prefect flow
``orchrm-pipeline``; ``orchrm demo`` calls it directly). Afterwards the champion is loaded from the
registry by alias and picks the best of N candidate plans for a held-out task, executing only
that one. The demo ends with the verdict, the champion version, the held-out figures and the
commands that open the MLflow and Prefect UIs on what it made.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchrm.config import PipelineConfig, load_config
from orchrm.ops.pipeline import PipelineResult, run_pipeline
from orchrm.ops.stages import champion_uri

Say = Callable[[str], None]

#: the held-out figures the demo's ending prints (the gates' N is added at run time)
HEADLINE = ("pairwise_accuracy", "ece", "gap_closed", "scoring_latency_ms_p50")


@dataclass(frozen=True)
class Example:
    """The best-of-N example: the champion scored ``candidates`` plans for ``question`` and only
    the best one ran."""

    domain: str
    question: str
    candidates: tuple[tuple[float, str, str], ...]  # (reward, plan shape, tiers), best first
    answer: str | None
    quality: float | None
    execution_tokens: int
    scoring_tokens: int


@dataclass(frozen=True)
class DemoResult:
    pipeline: PipelineResult
    example: Example | None


def best_of_n_example(config: PipelineConfig, *, say: Say = print) -> Example | None:
    """Load ``champion`` from the registry (:func:`orchrm.ops.serving.load_reward_model`), let a
    :class:`~orchrm.ops.serving.TestTimeScalableOrchestrator` score ``gates.best_of`` candidate plans
    for the first held-out task and execute only the best. None when there is no champion."""
    from orchrm.evaluation.pool import held_out_tasks
    from orchrm.execution.executor import MultiAgentExecutor
    from orchrm.ops import registry, tracking
    from orchrm.ops.serving import TestTimeScalableOrchestrator, load_reward_model

    if registry.champion_version(config) is None:
        say("no champion yet, so no best-of-N example: the first candidate failed a gate")
        return None
    model = load_reward_model(champion_uri(config), tracking_uri=tracking.tracking_uri(config))
    task = held_out_tasks(config)[0]
    n = config.evaluate.gates.best_of
    orch = TestTimeScalableOrchestrator(
        reward_model=model, num_candidates=n, executor=MultiAgentExecutor(noise=config.sandbox, seed=config.evaluate.seed), seed=config.evaluate.seed
    )
    result = orch.execute(task)
    say(f"\nbest-of-{n} with {champion_uri(config)} on a held-out {task.domain} task: {task.question[:200]}")
    rows = []
    for i, c in enumerate(result.candidates):
        tiers = ", ".join(c.plan.tiers_used()) or "no LLM"
        rows.append((c.score, c.plan.shape(), tiers))
        say(f" {'->' if i == 0 else '  '} reward {c.score:+.3f}  {c.plan.shape()}  [{tiers}]")
    say(
        f"executed only the best: answer {result.answer!r}, quality {result.quality}, {result.execution_tokens} "
        f"execution tokens ({result.scoring_tokens} tokens read by the reward model)"
    )
    return Example(task.domain, task.question, tuple(rows), result.answer, result.quality, result.execution_tokens, result.scoring_tokens)


def ending(result: PipelineResult, config: PipelineConfig) -> str:
    """The last lines of the demo: verdict, champion, held-out figures, the two UI commands."""
    lines = ["", "== done", f"verdict: {result.status} - {result.message}", f"champion: version {result.champion_version}"]
    if result.evaluation is not None:
        m = result.evaluation.metrics
        n = config.evaluate.gates.best_of
        keys = [*HEADLINE, f"best_of_{n}.reward_model", f"best_of_{n}.random", f"best_of_{n}.cost_only", f"best_of_{n}.expected_oracle"]
        figures = ", ".join(f"{k} {m[k]:.3f}" for k in keys if k in m)
        lines.append(f"held-out figures: {figures}")
        lines.append(f"report: {result.evaluation.report_dir}")
    lines += ["", "open what this made:", *ui_commands(result, config)]
    return "\n".join(lines)


def ui_commands(result: PipelineResult, config: PipelineConfig) -> list[str]:
    """The commands that open the MLflow UI on this run's store and the Prefect UI on the flow runs."""
    from orchrm.ops import tracking

    bin_dir = Path(sys.executable).parent
    mlflow = bin_dir / "mlflow" if (bin_dir / "mlflow").exists() else Path("mlflow")
    prefect = bin_dir / "prefect" if (bin_dir / "prefect").exists() else Path("prefect")
    uri = result.tracking_uri or tracking.tracking_uri(config)
    mlflow_cmd = f"  MLflow:  {_rel(mlflow)} ui --backend-store-uri {shlex.quote(uri)}   (http://127.0.0.1:5000)"
    home = os.environ.get("PREFECT_HOME")
    api = os.environ.get("PREFECT_API_URL")
    if api:
        prefect_cmd = f"  Prefect: the flow runs are on {api} (open it in a browser)"
    else:
        prefix = f"PREFECT_HOME={shlex.quote(_rel(Path(home)))} " if home else ""
        prefect_cmd = f"  Prefect: {prefix}{_rel(prefect)} server start   (http://127.0.0.1:4200)"
    return [mlflow_cmd, prefect_cmd]


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def run_demo(
    config: str | os.PathLike | PipelineConfig | None = None,
    *,
    out_dir: str | os.PathLike | None = None,
    say: Say = print,
    pipeline: Callable[..., PipelineResult] | None = None,
) -> DemoResult:
    """Run the pipeline (``pipeline``: default :func:`run_pipeline`; ``make demo`` passes the
    Prefect flow's runner), the best-of-N example with the champion, and print the ending."""
    cfg = config if isinstance(config, PipelineConfig) else load_config(config)
    run = pipeline or (lambda c, **kw: run_pipeline(c, **kw))
    result = run(cfg, run_dir=out_dir, say=say)
    example = best_of_n_example(cfg, say=say) if result.evaluation is not None else None
    say(ending(result, cfg))
    return DemoResult(pipeline=result, example=example)
