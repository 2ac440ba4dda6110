"""``orchrm demo`` / ``make demo``: the whole pipeline on the embedded sandbox, end to end.

collect -> validate artifacts -> build pairs -> validate pairs -> train -> held-out evaluation ->
best-of-N selection on a held-out task. Every figure printed is computed in this run; tables,
the model and the validation reports land under ``<data_dir>/demo``.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from orchrm.config import PipelineConfig, load_config


@dataclass
class DemoResult:
    out_dir: Path
    artifacts: int = 0
    pairs: int = 0
    pairwise_accuracy: dict[str, float] = field(default_factory=dict)
    best_of_n: pd.DataFrame | None = None
    seconds: dict[str, float] = field(default_factory=dict)


def _stage(name: str, result: DemoResult, say: Callable[[str], None]):
    class _Timer:
        def __enter__(self):
            say(f"\n== {name}")
            self.t0 = time.perf_counter()
            return self

        def __exit__(self, *exc):
            result.seconds[name] = round(time.perf_counter() - self.t0, 1)
            if exc[0] is None:
                say(f"   ({result.seconds[name]:.1f} s)")

    return _Timer()


def pairwise_accuracy(model, pairs: pd.DataFrame, by: tuple[str, ...] = ("granularity", "domain")) -> pd.DataFrame:
    """Share of pairs where the model scores ``chosen`` above ``rejected``, per group."""
    if pairs.empty:
        return pd.DataFrame(columns=[*by, "pairs", "accuracy"])
    chosen = model.score(list(pairs.prompt), list(pairs.chosen)).numpy()
    rejected = model.score(list(pairs.prompt), list(pairs.rejected)).numpy()
    scored = pairs.assign(correct=(chosen > rejected).astype(float))
    out = scored.groupby(list(by)).correct.agg(["size", "mean"]).reset_index()
    return out.rename(columns={"size": "pairs", "mean": "accuracy"})


def best_of_n(model, artifacts: pd.DataFrame, task_ids: set[str]) -> pd.DataFrame:
    """On held-out tasks, pick one of the executed candidate plans by reward-model score and
    compare its realised quality with a random candidate and the best candidate (per domain)."""
    finals = artifacts[artifacts.is_final & artifacts.task_id.isin(task_ids)]
    if finals.empty:
        return pd.DataFrame()
    finals = finals.assign(reward=model.score(list(finals.question), list(finals.plan_text)).numpy())
    rows = []
    for (domain, _task), g in finals.groupby(["domain", "task_id"], sort=True):
        rows.append(
            {
                "domain": domain,
                "random": float(g.quality.mean()),  # expectation of a uniform random pick
                "reward_model": float(g.loc[g.reward.idxmax(), "quality"]),
                "oracle": float(g.quality.max()),
            }
        )
    df = pd.DataFrame(rows)
    return df.groupby("domain").agg(tasks=("oracle", "size"), random=("random", "mean"), reward_model=("reward_model", "mean"), oracle=("oracle", "mean")).reset_index()


def run_demo(config: str | os.PathLike | PipelineConfig | None = None, *, out_dir: str | os.PathLike | None = None, say: Callable[[str], None] = print) -> DemoResult:
    """Run the pipeline on the sandbox and print what happened at each stage."""
    from orchrm.collect import collect, summarize
    from orchrm.executor import MultiAgentExecutor
    from orchrm.orchestrators import BaseSampler
    from orchrm.pairs import build_pairs
    from orchrm.tasks.base import stable_id
    from orchrm.traces import write_table
    from orchrm.train import fit
    from orchrm.validation import validate_artifacts, validate_pairs

    cfg = config if isinstance(config, PipelineConfig) else load_config(config)
    out = Path(out_dir) if out_dir else cfg.data_path("demo")
    out.mkdir(parents=True, exist_ok=True)
    result = DemoResult(out_dir=out)
    c = cfg.collect

    with _stage(f"1/6 collect: {c.tasks_per_domain} tasks x {c.plans_per_task} plans in {', '.join(c.domains)}", result, say):
        artifacts = collect(
            domains=c.domains,
            tasks_per_domain=c.tasks_per_domain,
            plans_per_task=c.plans_per_task,
            seed=c.seed,
            source=dict(c.sources) or None,
            workers=c.workers,
            noise=cfg.sandbox,
            orchestrators=c.orchestrators,
        )
        write_table(artifacts, out / "artifacts.parquet")
        result.artifacts = len(artifacts)
        say(summarize(artifacts))

    with _stage("2/6 validate artifacts (Great Expectations)", result, say):
        report = validate_artifacts(artifacts, out_dir=out / "validation" / "artifacts")
        say(str(report))

    with _stage("3/6 build win/loss pairs", result, say):
        pairs = build_pairs(artifacts, cfg.pairs)
        write_table(pairs, out / "pairs.parquet")
        result.pairs = len(pairs)
        counts = pairs.groupby(["source", "split"]).size().unstack(fill_value=0)
        say(counts.to_string())

    with _stage("4/6 validate pairs (Great Expectations)", result, say):
        report = validate_pairs(pairs, artifacts=artifacts, out_dir=out / "validation" / "pairs")
        say(str(report))

    with _stage(f"5/6 train the Bradley-Terry reward model ({cfg.model.encoder} encoder)", result, say):
        trained = fit(pairs, cfg.model, cfg.train, checkpoint_dir=out / "checkpoints")
        model = trained.model
        path = model.save(out / "model.safetensors")
        say(str(trained))
        say(f"saved {path}")

    with _stage("6/6 evaluate on held-out tasks (split = test)", result, say):
        test = pairs[pairs.split == "test"]
        acc = pairwise_accuracy(model, test)
        result.pairwise_accuracy = {f"{r.granularity}/{r.domain}": float(r.accuracy) for r in acc.itertuples()}
        say("pairwise accuracy (chosen scored above rejected):")
        say(acc.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        held_out = set(test.task_id) | {t for t in artifacts.task_id.unique() if _split_of(t, cfg) == "test"}
        bon = best_of_n(model, artifacts, held_out)
        result.best_of_n = bon
        say(f"\nbest-of-{c.plans_per_task} plan selection on held-out tasks (mean realised quality of the pick):")
        say(bon.to_string(index=False, float_format=lambda x: f"{x:.3f}"))

        # one worked example: score fresh candidates for one held-out task, execute only the best
        task_id = sorted(held_out)[0] if held_out else None
        if task_id is not None:
            row = artifacts[artifacts.task_id == task_id].iloc[0]
            from orchrm.tasks.base import load_tasks

            tasks = {t.task_id: t for d in c.domains for t in load_tasks(d, c.tasks_per_domain, seed=c.seed, source=c.source(d))}
            task = tasks[task_id]
            ex = MultiAgentExecutor(noise=cfg.sandbox, seed=c.seed)
            rng = random.Random(int(stable_id("demo", c.seed, n=8), 16))
            candidates = BaseSampler().sample(task, c.plans_per_task, rng)
            rewards = model.score(task.question, [p.render() for p in candidates]).tolist()
            best = max(range(len(candidates)), key=rewards.__getitem__)
            run = ex.run_plan(task, candidates[best])
            say(f"\nexample ({row.domain}, held out): {task.question[:200]}")
            for i, (p, r) in enumerate(zip(candidates, rewards, strict=True)):
                mark = "->" if i == best else "  "
                say(f" {mark} reward {r:+.3f}  {p.shape()}  [{', '.join(p.tiers_used()) or 'no LLM'}]")
            say(f"executed only the best: answer {run.answer!r}, quality {run.quality}, {run.tokens} tokens")
    return result


def _split_of(task_id: str, cfg: PipelineConfig) -> str:
    from orchrm.pairs import assign_split

    return str(assign_split([task_id], cfg.pairs.val_fraction, cfg.pairs.test_fraction)[0])
