"""The cached collect -> pairs -> fit -> pool steps that several benchmarks repeat.

Each step runs through the pipeline's stage function where one fits (:func:`collect_stage` and
:func:`pool_stage`, which log nothing to MLflow) and otherwise through the library function its
stage calls (:func:`orchrm.data.pairs.build_pairs` and :func:`orchrm.model.trainer.fit`: the
``pairs_stage`` and ``train_stage`` of a pipeline run log to MLflow, and train in a subprocess).

Results are cached under ``.orchrm/bench/<step>/<key>``, the key hashing every setting the step
reads with :func:`orchrm.util.digests.source_hash`, so a rerun redoes only what changed, and
changed code never reuses a stale table.

>>> pairs = pair_table(CollectConfig(tasks_per_domain=4, plans_per_task=4))   # doctest: +SKIP
>>> fitted = fit_cached(pairs, ModelConfig(), TrainConfig(epochs=1))          # doctest: +SKIP
>>> fitted.info["trained"]                                                    # doctest: +SKIP
'in this run'
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from orchrm.config import (
    CollectConfig,
    EvaluateConfig,
    ModelConfig,
    NoiseConfig,
    PairsConfig,
    TrainConfig,
)
from orchrm.ops.stages import collect_stage, pool_stage
from orchrm.util.digests import source_hash

#: the benchmarks' cache, under the folder they run from (the project's root)
CACHE = Path(".orchrm") / "bench"


def cache_key(*parts: Any) -> str:
    """16 hex of the settings ``parts`` (pydantic models by their JSON) and the package's source."""
    data = [p.model_dump(mode="json") if hasattr(p, "model_dump") else p for p in parts]
    text = json.dumps([data, source_hash()], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _stage_output(folder: Path, pattern: str) -> Path | None:
    """The file a stage wrote under ``folder`` in an earlier run, if any."""
    found = sorted(folder.glob(pattern))
    return found[0] if found else None


@dataclass(frozen=True)
class Collected:
    """A sandbox collection's artifact table on disk; ``seconds`` spent collecting it in this run
    (0.0 when it came from the cache)."""

    path: Path
    key: str
    seconds: float

    def frame(self) -> pd.DataFrame:
        from orchrm.data.tables import read_table

        return read_table(self.path)


def collected(collect: CollectConfig, sandbox: NoiseConfig | None = None, *, cache: Path = CACHE) -> Collected:
    """The artifacts of ``collect`` in the sandbox ``sandbox`` (default :class:`NoiseConfig`),
    collected once by :func:`orchrm.ops.pipeline.collect_stage`."""
    sandbox = sandbox or NoiseConfig()
    key = cache_key("collect", collect, sandbox)
    folder = cache / "collect" / key
    found = _stage_output(folder, "collect/*/artifacts.parquet")
    if found:
        return Collected(found, key, 0.0)
    t0 = time.perf_counter()
    out = collect_stage(collect, sandbox, data_dir=str(folder), code_version=source_hash())
    seconds = time.perf_counter() - t0
    _say(f"collected {out.rows} artifacts of {out.tasks} tasks in {seconds:.0f} s")
    return Collected(out.path, key, seconds)


@dataclass(frozen=True)
class PairTable:
    """A pair table (:data:`orchrm.data.ingest.PAIR_COLUMNS`) and the cache key of the settings it
    was built from (models trained on it are keyed on it)."""

    frame: pd.DataFrame
    key: str


def pair_table(collect: CollectConfig, sandbox: NoiseConfig | None = None, pairs: PairsConfig | None = None, *,
               cache: Path = CACHE) -> PairTable:
    """The pairs (``pairs``, default :class:`PairsConfig`) of the collection :func:`collected`
    returns, built once by :func:`orchrm.data.pairs.build_pairs`."""
    from orchrm.data.pairs import build_pairs
    from orchrm.data.tables import read_table, write_table

    sandbox, pairs = sandbox or NoiseConfig(), pairs or PairsConfig()
    key = cache_key("pairs", collect, sandbox, pairs)
    path = cache / "pairs" / f"{key}.parquet"
    if path.exists():
        return PairTable(read_table(path), key)
    table = build_pairs(collected(collect, sandbox, cache=cache).frame(), pairs)
    write_table(table, path)
    _say(f"built {len(table)} pairs")
    return PairTable(table, key)


@dataclass(frozen=True)
class Fitted:
    """A trained model and what a results file records of it (``info``: ``trained``, ``pairs``,
    ``cache_key``, and when trained in this run ``train_seconds``, ``epochs_run``, ``best_epoch``,
    ``averaged_epochs``). ``best_epoch_path``: the best validation epoch's own weights
    (``checkpoint_dir/best.safetensors``), what ``weight_average="none"`` would have returned."""

    model: Any
    info: dict[str, Any]
    best_epoch_path: Path | None = None

    def best_epoch_model(self) -> Any:
        """The model with the best validation epoch's own weights (None where the run kept none)."""
        from orchrm.model.reward_model import BradleyTerryModel

        return None if self.best_epoch_path is None else BradleyTerryModel.load(self.best_epoch_path)


def fit_cached(pairs: PairTable, model: ModelConfig, train: TrainConfig, *, cache: Path = CACHE) -> Fitted:
    """The model ``model`` trained by :func:`orchrm.model.trainer.fit` with ``train`` on ``pairs``
    (checkpoints in a temporary folder), trained once and then loaded from the cache."""
    from orchrm.model.checkpoints import BEST_CHECKPOINT
    from orchrm.model.reward_model import BradleyTerryModel
    from orchrm.model.trainer import fit
    from orchrm.util.fileio import atomic_write_bytes

    key = cache_key("fit", pairs.key, model, train)
    path = cache / "models" / f"{key}.safetensors"
    best = cache / "models" / f"{key}.best-epoch.safetensors"
    info: dict[str, Any] = {"pairs": int(len(pairs.frame)), "cache_key": key}
    run_info = path.with_suffix(".json")  # how the cached model's run went (its epochs), beside it
    if path.exists():
        earlier = json.loads(run_info.read_text()) if run_info.exists() else {}
        return Fitted(BradleyTerryModel.load(path), info | earlier | {"trained": "loaded from the benchmark cache"},
                      best if best.exists() else None)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as checkpoints:
        result = fit(pairs.frame, model, train, checkpoint_dir=checkpoints, progress=False)
        seconds = round(time.perf_counter() - t0, 1)
        kept = Path(checkpoints) / BEST_CHECKPOINT
        if kept.is_file():
            best.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(kept, best)
    result.model.save(path)
    epochs = {"epochs_run": len(result.history), "best_epoch": result.best_epoch, "averaged_epochs": result.averaged_epochs}
    atomic_write_bytes(run_info, lambda tmp: Path(tmp).write_text(json.dumps(epochs)))
    _say(f"trained in {seconds} s")
    return Fitted(result.model, info | {"trained": "in this run", "train_seconds": seconds, **epochs}, best if best.exists() else None)


@dataclass(frozen=True)
class Pool:
    """A held-out candidate pool (:class:`orchrm.evaluation.pool.CandidatePool`); ``seconds``
    spent building it in this run (0.0 when it came from the cache)."""

    pool: Any
    seconds: float


def held_out_pool(evaluate: EvaluateConfig, collect: CollectConfig, sandbox: NoiseConfig | None = None, *,
                  cache: Path = CACHE) -> Pool:
    """The candidate pool of ``evaluate`` (its tasks never those of ``collect``), built once by
    :func:`orchrm.ops.pipeline.pool_stage` with ``collect.workers`` processes."""
    from orchrm.evaluation.pool import CandidatePool

    sandbox = sandbox or NoiseConfig()
    folder = cache / "pool" / cache_key("pool", evaluate, collect, sandbox)
    found = _stage_output(folder, "pools/*/pool.parquet")
    if found:
        return Pool(CandidatePool.load(found), 0.0)
    t0 = time.perf_counter()
    out = pool_stage(evaluate, collect, sandbox, data_dir=str(folder), code_version=source_hash())
    seconds = time.perf_counter() - t0
    _say(f"pool: {out.tasks} tasks, {out.rows} rows, built in {seconds:.0f} s")
    return Pool(CandidatePool.load(out.path), seconds)
