"""Typed, frozen, per-stage configuration, loaded from YAML and validated on load.

One section per stage, nested in :class:`PipelineConfig`; unknown keys are rejected with a
:class:`ConfigError` that names the field. Derived values are methods, never mutated fields.

>>> cfg = PipelineConfig()
>>> cfg.collect.plans_per_task
8
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from orchrm.errors import ConfigError
from orchrm.execution.sandbox.config import NoiseConfig
from orchrm.plans import SAMPLERS
from orchrm.util.frozen import FrozenConfig


class CollectConfig(FrozenConfig):
    """Artifact collection: which tasks, how many candidate plans each, which samplers."""

    domains: tuple[str, ...] = ("math", "code", "multihop", "webqa")
    #: 200 by default: distinct tasks teach the plan prior better than more pairs of fewer tasks
    #: (issue 24: 200 tasks with at most 16 pairs each beat 100 tasks with 64 at the same ~11k pairs);
    #: 8 plans each: more tasks with fewer plans for the same executions (400 x 4, 600 x 4 x 2 runs)
    #: picked worse and read the question no better (benchmarks/configs/tasks*_plans4_*.yaml)
    tasks_per_domain: int = Field(200, ge=1)
    plans_per_task: int = Field(8, ge=1, le=64)
    seed: int = Field(0, ge=0)
    #: task source per domain ("builtin" generators by default; e.g. math: gsm8k)
    sources: dict[str, str] = Field(default_factory=dict)
    #: share of each task's plans written by each sampler (normalised): ``base`` (the broad prior),
    #: ``specialized`` (the prior's plans a question-reading rule rates best) or ``panel`` (plans from
    #: a panel of 16 per domain that every task of the domain draws from: the same plans on
    #: different questions)
    orchestrators: dict[str, float] = Field(default_factory=lambda: {"base": 0.5, "specialized": 0.5})
    #: worker processes; None = one per CPU core
    workers: int | None = Field(None, ge=1)
    #: tasks per chunk when the flows map collection and the sandbox's held-out pool over chunks
    #: (task runs ``collect-chunk`` / ``pool-chunk``, spread by the task runner: a Dask cluster with
    #: ``pipeline.task_runner: dask``): each domain's tasks are cut into the fewest contiguous,
    #: near-equal chunks of at most this many. Fewer, larger chunks pay less per-task-run overhead;
    #: more spread better. The tables do not depend on it
    chunk_tasks: int = Field(16, ge=1)
    #: ``full``: run every candidate plan to its sink (correct-over-incorrect pairs need that);
    #: ``branch``: run plan prefixes only, ``branches`` alternatives at every shared prefix down
    #: to ``branch_depth`` (orchrm.execution.collect.branch_plans): intermediate pairs for a fraction of
    #: the tokens (``plans_per_task`` is then unused)
    mode: Literal["full", "branch"] = "full"
    #: branch mode: alternatives (plans with distinct next steps) per shared prefix
    branches: int = Field(16, ge=2, le=64)
    #: branch mode: the deepest plan depth that runs; 0 = only every plan's first step. Level d
    #: branches every prefix of level d - 1: up to branches ** (d + 1) prefix runs per task
    branch_depth: int = Field(0, ge=0, le=8)
    #: executions of every plan per task, each its own run: plan pairs compare a plan's mean
    #: quality over them, so labels follow expected rather than lucky quality (issue 17), for
    #: ``repeats`` times the collection tokens. 3 by default: on fresh tasks the model trained on
    #: one execution per plan trailed the priciest-plan rule in every domain (issue 24)
    repeats: int = Field(3, ge=1, le=16)

    @field_validator("orchestrators")
    @classmethod
    def _known_samplers(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = set(value) - set(SAMPLERS)
        if unknown:
            raise ValueError(f"unknown sampler(s) {sorted(unknown)}; use {', '.join(SAMPLERS)}")
        if not value or sum(value.values()) <= 0 or min(value.values()) < 0:
            raise ValueError("sampler shares must be >= 0 and sum to more than 0")
        return value

    def source(self, domain: str) -> str:
        return self.sources.get(domain, "builtin")


class PairsConfig(FrozenConfig):
    """Pair building (DESIGN §5); every field is read by :class:`orchrm.data.pairs.PairwiseComparator`.

    A source is built when it is listed in ``sources`` *and* its granularity is in
    ``granularity``: ``correct-over-incorrect`` and ``specialized-over-base`` are plan-level,
    ``intermediate`` is node-level.
    """

    granularity: tuple[Literal["plan", "node"], ...] = ("plan", "node")
    sources: tuple[Literal["correct-over-incorrect", "intermediate", "specialized-over-base"], ...] = (
        "correct-over-incorrect",
        "intermediate",
        "specialized-over-base",
    )
    #: the actions of an ``intermediate`` pair. ``node``: prompt = question + rendered ancestor
    #: prefix, action = the node's ``<agent .../>`` line and its output ``content``.
    #: ``plan_prefix``: prompt = the question, action = the node and its ancestors as a plan of
    #: their own (what a plan scorer reads before anything runs; a prefix run several times
    #: counts once, with its mean quality). Same-state rule and labels as ``node``; issue 17
    #: measures which transfers to plan selection (benchmarks/results/token_efficiency.md):
    #: ``plan_prefix``, the default (node actions also train several times slower).
    intermediate_action: Literal["node", "plan_prefix"] = "plan_prefix"
    #: pairs whose quality difference is below this are ties and dropped
    min_margin: float = Field(0.1, ge=0.0, le=1.0)
    #: per-task cap, sampled uniformly among the task's pairs; None keeps every pair. 16 by
    #: default: with the built-in 200 tasks per domain, about 11k pairs, a nightly retrain of a
    #: few minutes on 2 CPU cores (benchmarks/results/nightly_retrain.md)
    max_pairs_per_task: int | None = Field(16, ge=1)
    #: margin of a specialized-over-base pair: a prior, not a measured quality difference
    prior_margin: float = Field(0.5, gt=0.0, le=1.0)
    #: seeds the per-task cap; the split never depends on it (it is a hash of task_id)
    seed: int = Field(0, ge=0)
    #: fraction of tasks in val and test; the rest trains
    val_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    test_fraction: float = Field(0.2, ge=0.0, lt=1.0)

    @field_validator("granularity", "sources")
    @classmethod
    def _not_empty(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("give at least one value")
        return tuple(dict.fromkeys(value))

    @model_validator(mode="after")
    def _fractions_leave_train(self) -> PairsConfig:
        if self.val_fraction + self.test_fraction >= 1.0:
            raise ValueError(
                f"val_fraction + test_fraction = {self.val_fraction + self.test_fraction:g} leaves no task "
                "to train on; keep the sum below 1"
            )
        return self


class ModelConfig(FrozenConfig):
    """Reward model architecture (DESIGN §6); the fields of :class:`orchrm.model.reward_model.BradleyTerryModel`.

    ``encoder`` is ``scratch`` (a BERT built from this config, with a WordPiece tokenizer trained on
    the training texts), ``minilm`` (all-MiniLM-L6-v2, offline) or a local Hugging Face model
    directory. ``hidden_dim``/``num_layers``/``num_heads``/``vocab_size``/``pretokenizer`` shape the
    scratch encoder only; ``hidden_dim`` is also the width of the reward head for every encoder.
    """

    encoder: str = "scratch"
    #: ``shared_prompt``: the prompt is encoded once, alone, and the action's tokens attend to it
    #: (N candidates of one task cost one prompt pass); ``joint``: prompt and action form one
    #: sequence (a classic cross-encoder, what TRL's RewardTrainer trains). BERT-family encoders
    #: support both; other architectures only ``joint``.
    architecture: Literal["shared_prompt", "joint"] = "shared_prompt"
    hidden_dim: int = Field(256, ge=8)
    num_layers: int = Field(3, ge=1)
    num_heads: int = Field(4, ge=1)
    #: total tokens of prompt + action, special tokens included
    max_length: int = Field(256, ge=16, le=4096)
    #: tokens the prompt may use (its beginning and end are kept); None = half of max_length
    max_prompt_length: int | None = Field(None, ge=4)
    vocab_size: int = Field(8000, ge=100)
    #: scratch tokenizer: ``whitespace`` keeps ``type="WebSearch"`` whole (plan lines become ~5
    #: tokens instead of ~25); ``bert`` splits punctuation like BERT's tokenizer
    pretokenizer: Literal["whitespace", "bert"] = "whitespace"
    #: dropout on hidden states and in the head
    dropout: float = Field(0.1, ge=0.0, lt=1.0)
    #: dropout on attention probabilities; at 0 PyTorch's fused attention kernel also runs in
    #: training, without it attention falls back to explicit matrices and random masks (on the
    #: CPU that is most of a training step)
    attention_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    #: encoder layers to train, counted from the top: None = all (and the embeddings), 0 = the
    #: encoder is frozen (its features are computed once per text and cached by the Trainer)
    train_layers: int | None = Field(None, ge=0)
    #: seed of the weight initialisation (scratch encoder and head)
    seed: int = Field(0, ge=0)
    #: models trained apart and scored as one: member ``k`` has model and training seed
    #: ``seed + k`` and its own early stopping, and the reward is the mean of the members'
    #: standardised rewards. Training and scoring cost ``members`` times one model's.
    members: int = Field(1, ge=1, le=16)

    @model_validator(mode="after")
    def _consistent(self) -> ModelConfig:
        if self.encoder == "scratch" and self.hidden_dim % self.num_heads:
            raise ValueError(f"hidden_dim ({self.hidden_dim}) must be a multiple of num_heads ({self.num_heads})")
        if self.max_prompt_length is not None and self.max_prompt_length > self.max_length - 4:
            raise ValueError(
                f"max_prompt_length ({self.max_prompt_length}) must leave room for the action: "
                f"at most max_length - 4 = {self.max_length - 4}"
            )
        return self

    def prompt_length(self) -> int:
        """Tokens the prompt may use, its [CLS] and [SEP] included."""
        return self.max_prompt_length if self.max_prompt_length is not None else self.max_length // 2


class TrainConfig(FrozenConfig):
    """Trainer settings (DESIGN §6); the fields of :class:`orchrm.model.trainer.Trainer`."""

    #: pairs per optimiser step (per process under torchrun); batches are grouped by task so each
    #: distinct text is encoded once per step
    batch_size: int = Field(32, ge=1)
    #: peak learning rate; None = the model's own ``lr`` (3e-4 unless set: the scratch encoder's
    #: best in benchmarks/results/sweep_defaults.md; 1e-4 with 10 epochs ranked a support desk's
    #: plans near chance)
    lr: float | None = Field(None, gt=0, allow_inf_nan=False)
    #: an epoch budget; early stopping (``patience``) usually ends sooner
    epochs: int = Field(20, ge=1)
    #: validate (and checkpoint) every this many epochs
    eval_interval: int = Field(1, ge=1)
    weight_decay: float = Field(0.01, ge=0, allow_inf_nan=False)
    warmup_ratio: float = Field(0.1, ge=0, lt=1)
    lr_schedule: Literal["linear", "cosine", "constant"] = "linear"
    grad_clip: float = Field(1.0, gt=0, allow_inf_nan=False)
    #: stop after this many evaluations without a better ``monitor`` (a few dozen validation
    #: tasks give a noisy loss: at 3 the sweep's scratch runs stopped at epoch 6, still learning)
    patience: int = Field(6, ge=1)
    #: what early stopping and the best weights follow: ``val_loss`` (lower is better) or
    #: ``val_accuracy`` (higher is better; ties keep the earlier epoch). Against ``val_loss``,
    #: ``val_accuracy`` ranked one seed of the support desk's held-out tickets
    #: (orchrm/execution/support_desk.py) better and another worse, and left the sandbox's
    #: best-of-5 where it was: not the default
    monitor: Literal["val_loss", "val_accuracy"] = "val_loss"
    min_delta: float = Field(0.0, ge=0, allow_inf_nan=False)
    #: put the best validation weights back into the model when training ends (with
    #: ``weight_average="none"``; ``checkpoint_dir/best.safetensors`` holds them either way)
    restore_best: bool = True
    #: ``from_best``: the trained model is the mean of the weights at every evaluation from the
    #: best one (by ``monitor``) to the last (stochastic weight averaging,
    #: ``torch.optim.swa_utils.AveragedModel``; a new best restarts the mean). ``none``: the best
    #: (``restore_best``) or last weights. The validation loss bottoms out early, at weights that
    #: still rank plans poorly, and one seed's best epoch picks plans very differently from
    #: another's; the mean of the epochs after it is steadier and better
    #: (benchmarks/results/question_reading.md compares the two for each model seed)
    weight_average: Literal["from_best", "none"] = "from_best"
    #: after training, divide the rewards by the one temperature that best fits the validation
    #: pairs' outcomes, ``-log sigmoid((r_w - r_l) / T)`` without margins (temperature scaling,
    #: Guo et al. 2017; the head's last layer is scaled): ``sigmoid(r_a - r_b)`` becomes a
    #: calibrated chance that ``a`` wins and no ranking changes. The mean of the weights
    #: (``weight_average``) gives larger reward differences than any one epoch, and the margins
    #: of the loss push them further; without this its win probabilities are over-confident
    calibrate: bool = True
    #: use the pair's ``margin`` in the loss: -log sigmoid(r_w - r_l - margin)
    use_margin: bool = True
    #: TRL's center_rewards_coefficient: + coef * mean((r_w + r_l)^2); None = off
    center_rewards_coefficient: float | None = Field(None, ge=0, allow_inf_nan=False)
    #: ``auto`` = bf16 autocast on CUDA when supported, fp32 otherwise
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    #: tasks held out for validation when the table has no ``val`` rows
    val_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    #: report the training loss to callbacks every this many steps
    log_interval: int = Field(10, ge=1)
    seed: int = Field(0, ge=0)


class GatesConfig(FrozenConfig):
    """Promotion gates (DESIGN §7): a candidate becomes ``champion`` only when every enabled gate
    passes. Each default protects against one way a model can look good and be useless. The
    best-of-N gates read the expected quality of each selector's pick where the pool measured it
    (``repeats`` > 0: less luck than one realised draw), else the realised quality; see
    :func:`orchrm.evaluation.check_gates`."""

    #: held-out pairwise accuracy (all granularities); below it the model barely ranks
    min_pairwise_accuracy: float = Field(0.6, ge=0.0, le=1.0)
    #: N at which best-of-N gates are read
    best_of: int = Field(8, ge=2)
    #: reward-model best-of-``best_of`` quality minus a random plan (the mean over the same N
    #: candidates), in quality points (0-1 scale); below 5 points scoring N plans buys too little
    #: to be worth sampling them (the demo's model gains 10.6 at N = 8: benchmarks/results/best_of_n.md)
    min_best_of_n_gain: float = Field(0.05, ge=-1.0, le=1.0)
    #: RM best-of-N must beat always-the-priciest-plan (else it learned only "spend more")
    beat_cost_only: bool = True
    #: p50 milliseconds to score ``best_of`` candidates of one question on this machine
    max_scoring_latency_ms: float = Field(250.0, gt=0)
    #: must beat the current champion on the same tasks and candidates, same run: the paired
    #: difference (candidate - champion) of the best-of-N pick's quality per task, bootstrapped
    #: over tasks (``bootstrap``, ``seed``); on a pool without best-of-N, of held-out pair correctness
    beat_champion: bool = True
    #: the lower bound of that paired 95% interval must exceed this (quality points): a
    #: difference the interval cannot tell from 0 (or a tie) keeps the champion
    champion_margin: float = Field(0.0, ge=0.0, le=1.0)


class EvaluateConfig(FrozenConfig):
    """Held-out evaluation (DESIGN §7): fresh tasks from ``seed`` (never the collection seed),
    ``candidates`` plans each, every candidate executed once per pool seed and re-run ``repeats``
    times for its expected quality; or, on a user's own traces, a replay of their held-out tasks."""

    #: the held-out candidate pool. ``sandbox``: fresh sandbox tasks (the fields below).
    #: ``replay``: the run's own held-out tasks (split ``test`` of its artifacts, never trained
    #: on) with at least two distinct plans, each logged plan a candidate (expected quality = the
    #: mean over its logged runs, realised quality one run's, its logged tokens; ``candidates``
    #: caps the plans per task, N above what the smallest task has is dropped, ``repeats`` and
    #: ``tasks_per_domain`` are unused). ``auto``: replay when the run ingests traces, else sandbox
    pool: Literal["auto", "sandbox", "replay"] = "auto"
    tasks_per_domain: int = Field(30, ge=1)
    candidates: int = Field(16, ge=2, le=64)
    best_of: tuple[int, ...] = (1, 2, 4, 8, 16)
    #: candidate pools drawn (execution seeds); their spread is reported beside the task interval
    pool_seeds: tuple[int, ...] = (0, 1, 2)
    #: re-runs per candidate for its expected quality and cost (the expected-quality oracle, the
    #: gap closed, the cost-only selector); 0 = none: the mean over the pool seeds' executions
    repeats: int = Field(10, ge=0)
    #: seed of the held-out tasks; must differ from collect.seed
    seed: int = Field(2026, ge=0)
    #: bootstrap resamples (over tasks) for the 95% intervals
    bootstrap: int = Field(1000, ge=0)
    #: bins of the reliability diagram / ECE
    calibration_bins: int = Field(10, ge=2)
    gates: GatesConfig = Field(default_factory=GatesConfig)

    def pool_kind(self, *, ingests: bool) -> Literal["sandbox", "replay"]:
        """The pool a run builds: ``pool``, with ``auto`` resolved (replay when the run ``ingests`` traces)."""
        if self.pool == "auto":
            return "replay" if ingests else "sandbox"
        return self.pool

    @field_validator("best_of", "pool_seeds")
    @classmethod
    def _sorted_unique(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not value or min(value) < 0:
            raise ValueError("give at least one value, each >= 0")
        return tuple(sorted(set(value)))

    @model_validator(mode="after")
    def _enough_candidates(self) -> EvaluateConfig:
        largest = max(*self.best_of, self.gates.best_of)
        if min(self.best_of) < 1 or largest > self.candidates:
            raise ValueError(
                f"best-of-N needs 1 <= N <= candidates ({self.candidates}); best_of {list(self.best_of)} and "
                f"gates.best_of {self.gates.best_of} do not fit: raise candidates or lower N"
            )
        return self


class RegistryConfig(FrozenConfig):
    """MLflow tracking and the model registry (DESIGN §8). ``MLFLOW_TRACKING_URI`` overrides
    ``tracking_uri``; without either the store is SQLite under ``data_dir``."""

    tracking_uri: str | None = None
    experiment: str = "orchrm"
    model_name: str = "orchrm-reward"


_ENDPOINT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?):(?P<port>[0-9]{1,5})$")


class TorchrunConfig(FrozenConfig):
    """torchrun's launch settings (``pipeline.torchrun``), rendered into its command line by
    :func:`orchrm.ops.stages.train_command`; read only with ``pipeline.launcher: torchrun``.

    One node (``nnodes: 1``, the default) runs ``torchrun --standalone``: a rendezvous on a free
    local port. Several nodes run the same command on every node, each with its own ``node_rank``,
    and meet at ``rdzv_endpoint`` (``host:port`` of node 0, reachable from every node). Training
    uses gloo on CPU, nccl on GPU (:mod:`orchrm.model.trainer`).

    >>> TorchrunConfig(nnodes=2, node_rank=1, rdzv_endpoint="10.0.0.1:29400").world_size()
    2
    """

    #: nodes that train together
    nnodes: int = Field(1, ge=1)
    #: this node's rank, 0 .. nnodes - 1; node 0 hosts the rendezvous and runs global rank 0, the
    #: process that logs to MLflow and writes the model (the pipeline runs there)
    node_rank: int = Field(0, ge=0)
    #: training processes per node (one per GPU; on CPU, a share of the cores each)
    nproc_per_node: int = Field(1, ge=1)
    #: ``static``: ranks follow ``node_rank`` (global rank = node_rank * nproc_per_node + local
    #: rank), so rank 0 runs on node 0, where the pipeline reads the model. ``c10d``: torch's
    #: elastic rendezvous, which ignores ``node_rank`` and gives ranks in its own order, so rank 0
    #: (and the model it writes) may be on any node: for ``orchrm train`` with ``--out`` on a
    #: filesystem every node shares
    rdzv_backend: Literal["static", "c10d"] = "static"
    #: ``host:port`` of the rendezvous on node 0 (``static``: its MASTER_ADDR:MASTER_PORT), e.g.
    #: ``10.0.0.1:29400`` or ``[fd00::1]:29400``; needed with more than one node
    rdzv_endpoint: str | None = None
    #: the job's rendezvous id: the same on every node of one training run
    rdzv_id: str = Field("orchrm-train", pattern=r"^[A-Za-z0-9._-]+$")

    @field_validator("rdzv_endpoint")
    @classmethod
    def _host_and_port(cls, value: str | None) -> str | None:
        if value is None:
            return value
        match = _ENDPOINT.match(value)
        if match is None or not 1 <= int(match["port"]) <= 65535:
            raise ValueError(
                f"{value!r} is not host:port (a host name or address, a colon, a port 1-65535), e.g. 10.0.0.1:29400 "
                "or [fd00::1]:29400"
            )
        return value

    @model_validator(mode="after")
    def _nodes_fit(self) -> TorchrunConfig:
        if self.node_rank >= self.nnodes:
            raise ValueError(f"node_rank {self.node_rank} must be below nnodes ({self.nnodes}): nodes are numbered 0 .. nnodes - 1")
        if self.nnodes > 1 and self.rdzv_endpoint is None:
            raise ValueError(
                f"nnodes {self.nnodes} needs rdzv_endpoint: the host:port of node 0 that every node can reach, "
                "e.g. 10.0.0.1:29400"
            )
        return self

    def world_size(self) -> int:
        """Training processes in all (``WORLD_SIZE``)."""
        return self.nnodes * self.nproc_per_node


class RunConfig(FrozenConfig):
    """How :func:`orchrm.ops.pipeline.run_pipeline` runs its stages: where new traces arrive, how
    training is launched, and the Prefect task runner of the flows in ``flows/``."""

    #: folder the nightly run ingests new traces from (``*.jsonl`` / ``*.parquet`` in the
    #: artifact schema, DESIGN §3); None = collect in the sandbox
    traces_dir: str | None = None
    #: retention window of an ingest run, in days: each night trains on the trace files modified
    #: in the last ``window_days`` days (newest by modification time), not on all history, so a
    #: night's ingest, pairs and training cost follows the window, not the folder's age; older
    #: files stay in the folder, unread. None = no age limit
    window_days: float | None = Field(None, gt=0, allow_inf_nan=False)
    #: retention window by count: each night trains on at most the ``max_files`` newest trace files
    #: (by modification time) inside ``window_days``. None = no limit. A night has something to do
    #: only when a file inside the window is new (not trained on before)
    max_files: int | None = Field(None, ge=1)
    #: ``process``: ``orchrm train`` in a subprocess; ``torchrun``: ``torchrun -m orchrm.cli train``
    #: with the settings of ``torchrun`` (one node or several)
    launcher: Literal["process", "torchrun"] = "process"
    #: how torchrun starts training: processes per node, and the nodes and their rendezvous
    torchrun: TorchrunConfig = Field(default_factory=TorchrunConfig)
    #: training is stopped (and nothing registered) after this many seconds
    train_timeout_s: float = Field(3600.0, gt=0)
    #: Prefect task runner of the flows: ``threads`` (ThreadPoolTaskRunner) or ``dask``
    #: (prefect-dask's DaskTaskRunner; a local cluster unless ``dask_address`` names a scheduler)
    task_runner: Literal["threads", "dask"] = "threads"
    max_workers: int = Field(4, ge=1)
    dask_address: str | None = None
    #: retries of the flows' find-new-traces task when the traces folder cannot be read (tracking and
    #: registry calls retry themselves, a bounded number of times, and no other stage is retried)
    retries: int = Field(2, ge=0)
    retry_delay_s: float = Field(10.0, ge=0)
    #: where the flows persist the cached stages' results (JSON): the slug ``<block-type>/<name>`` of
    #: a Prefect storage block on a store every worker reaches (``remote-file-system/orchrm-results``
    #: with an ``s3://`` base path on S3 or MinIO); None = the folder ``<data_dir>/prefect-results``
    #: of the machine a flow runs on
    result_storage: str | None = Field(None, pattern=r"^[a-z0-9-]+/[A-Za-z0-9_.-]+$")

    @model_validator(mode="before")
    @classmethod
    def _nproc_per_node_moved(cls, data: Any) -> Any:
        """``pipeline.nproc_per_node`` (before ``pipeline.torchrun`` existed) still reads as
        ``pipeline.torchrun.nproc_per_node``."""
        if not isinstance(data, Mapping) or "nproc_per_node" not in data:
            return data
        data = dict(data)
        nproc = data.pop("nproc_per_node")
        section = data.get("torchrun") or {}
        section = dict(section.model_dump() if isinstance(section, BaseModel) else section)
        if section.setdefault("nproc_per_node", nproc) != nproc:
            raise ValueError(
                f"nproc_per_node ({nproc}) and torchrun.nproc_per_node ({section['nproc_per_node']}) disagree; "
                "keep only torchrun.nproc_per_node"
            )
        data["torchrun"] = section
        return data

    @model_validator(mode="after")
    def _torchrun_needs_its_launcher(self) -> RunConfig:
        if self.launcher != "torchrun" and self.torchrun.world_size() > 1:
            raise ValueError(
                f"torchrun asks for {self.torchrun.world_size()} training processes "
                f"(nnodes {self.torchrun.nnodes} x nproc_per_node {self.torchrun.nproc_per_node}) but launcher is "
                f"{self.launcher!r}, which starts one: set launcher: torchrun"
            )
        return self


class BackendConfig(FrozenConfig):
    """What runs the agents (:mod:`orchrm.execution.llm`): the built-in ``sandbox`` (no LLM), a
    local causal LM through ``transformers`` or an OpenAI-compatible chat-completions server
    (vLLM, Ollama, llama.cpp's server, OpenAI) through ``openai``."""

    kind: Literal["sandbox", "transformers", "openai"] = "sandbox"
    #: transformers: a model directory, a ``.gguf`` file, or the folder of ``gguf_file``; openai: the served model's name
    model: str | None = None
    #: transformers: a GGUF file inside ``model`` (dequantized on load)
    gguf_file: str | None = None
    #: openai: the server's base URL, e.g. ``http://127.0.0.1:8000/v1``; else ``$OPENAI_BASE_URL``
    base_url: str | None = None
    #: openai: the API key; else ``$OPENAI_API_KEY`` (a local server may need none). Never logged
    api_key: str | None = None
    #: openai: seconds to wait for one reply, and attempts on a timeout, a 429 or a 5xx (with backoff)
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(4, ge=0)
    #: openai: requests in flight at once
    concurrency: int = Field(4, ge=1)
    #: tokens per completion at most, and the sampling temperature of samples that must differ
    #: (SelfConsistency, Debate); single answers are greedy
    max_tokens: int = Field(256, ge=1)
    temperature: float = Field(0.7, ge=0)
    #: transformers: ``cpu``, ``cuda``, ``cuda:1``...; None: a GPU when there is one
    device: str | None = None

    @model_validator(mode="after")
    def _needs_a_model(self) -> BackendConfig:
        if self.kind != "sandbox" and not self.model:
            raise ValueError(f"backend.kind {self.kind!r} needs backend.model (a model directory for transformers, "
                             "the served model's name for openai)")
        if self.gguf_file and self.kind != "transformers":
            raise ValueError("backend.gguf_file is read by the transformers backend only")
        return self


class PipelineConfig(FrozenConfig):
    """The whole pipeline. ``data_dir`` holds run data (tables, models, tracking store)."""

    data_dir: str = ".orchrm"
    #: the sandbox's noise model (orchrm/execution/sandbox/config.py: configuration only, no simulator)
    sandbox: NoiseConfig = Field(default_factory=NoiseConfig)
    #: what runs the agents: the sandbox (default) or a real LLM
    backend: BackendConfig = Field(default_factory=BackendConfig)
    collect: CollectConfig = Field(default_factory=CollectConfig)
    pairs: PairsConfig = Field(default_factory=PairsConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    registry: RegistryConfig = Field(default_factory=RegistryConfig)
    pipeline: RunConfig = Field(default_factory=RunConfig)

    @model_validator(mode="after")
    def _held_out_seed(self) -> PipelineConfig:
        if self.evaluate.seed == self.collect.seed:
            raise ValueError(
                f"evaluate.seed ({self.evaluate.seed}) equals collect.seed: held-out tasks would be training "
                "tasks; choose another evaluate.seed"
            )
        return self

    def data_path(self, *parts: str) -> Path:
        """A path under ``data_dir`` (relative paths resolve from the current directory)."""
        return Path(self.data_dir).expanduser().joinpath(*parts)


def settings_error(origin: str, problems: Sequence[tuple[str, str]]) -> ConfigError:
    """The :class:`ConfigError` of bad settings, worded as every settings check words it: a
    first line naming where the values came from (``origin``), then one ``field: problem`` line
    per problem.

    >>> print(settings_error("Trainer(...)", [("lr", "Input should be greater than 0")]))
    invalid configuration in Trainer(...):
      lr: Input should be greater than 0
    """
    return ConfigError("\n".join([f"invalid configuration in {origin}:", *(f"  {where}: {msg}" for where, msg in problems)]))


def format_validation_errors(exc: ValidationError, origin: str) -> str:
    """A pydantic error as one line per bad field, for :class:`ConfigError` (``origin``: where the values came from)."""
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; see orchrm/config.py for the fields)"
        problems.append((where, msg))
    return str(settings_error(origin, problems))


def with_overrides(section: BaseModel, changes: Mapping[str, Any], *, origin: str = "the command line") -> Any:
    """``section`` (a config section) with ``changes`` applied and the whole validated again
    (``model_copy(update=...)`` would skip validation); ConfigError names each bad field.

    The one way settings given beside a config are checked: the command line, the keyword
    arguments of :class:`~orchrm.model.reward_model.BradleyTerryModel`,
    :class:`~orchrm.model.trainer.Trainer` and :class:`~orchrm.data.pairs.PairwiseComparator`
    all come through here (``origin`` says which, e.g. ``"Trainer(...)"``).

    >>> with_overrides(TrainConfig(), {"epochs": 3}).epochs
    3
    """
    if not changes:
        return section
    try:
        return type(section).model_validate(section.model_dump() | dict(changes))
    except ValidationError as exc:
        raise ConfigError(format_validation_errors(exc, origin)) from None


def config_from_dict(data: dict[str, Any] | None, *, origin: str = "<dict>") -> PipelineConfig:
    """Validate a plain dict into a :class:`PipelineConfig` (ConfigError names each bad field)."""
    try:
        return PipelineConfig.model_validate(data or {})
    except ValidationError as exc:
        raise ConfigError(format_validation_errors(exc, origin)) from None


def load_config(path: str | os.PathLike | None = None) -> PipelineConfig:
    """Load and validate a YAML config; ``None`` gives the defaults.

    A file may start from another with ``extends: <path>`` (relative to the file): its sections are
    merged into the other's, key by key, a mapping into a mapping and anything else replacing the
    value it extends. The merged settings are validated as one file.
    """
    if path is None:
        return PipelineConfig()
    source = Path(path)
    data, bases = _read_extended(source, ())
    origin = f"{source} (which extends {' -> '.join(map(str, bases))})" if bases else str(source)
    return config_from_dict(data, origin=origin)


def _read_extended(source: Path, chain: tuple[Path, ...]) -> tuple[dict[str, Any], list[Path]]:
    """The settings of ``source`` merged onto those of the file it ``extends``, and the files it
    extends, nearest first (``chain``: the files that extend it, to refuse a loop)."""
    data = _read_yaml_mapping(source)
    base = data.pop("extends", None)
    if base is None:
        return data, []
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{source}: extends must be the path of another config file, not {base!r}")
    here = chain + (source.resolve(),)
    parent = (source.parent / base).resolve()
    if parent in here:
        loop = " -> ".join(str(p) for p in (*here, parent))
        raise ConfigError(f"{source}: extends makes a loop ({loop}); remove one of the extends keys")
    if not parent.is_file():
        raise ConfigError(f"{source}: extends {base}, but {parent} is not a file; give a path relative to {source.parent}")
    inherited, bases = _read_extended(parent, here)
    return _merged(inherited, data), [source.parent / base, *bases]


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged into ``base``: mappings key by key, any other value replaced."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _read_yaml_mapping(source: Path) -> dict[str, Any]:
    """One config file's top-level mapping (empty for an empty file); ConfigError says what is wrong."""
    if not source.is_file():
        what = "is a directory, not a file" if source.is_dir() else "not found"
        raise ConfigError(f"config file {source} {what}; see configs/ for examples")
    try:
        data = yaml.safe_load(source.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source} is not valid YAML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source} is not UTF-8 text ({exc.reason} at byte {exc.start}): save it as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"config file {source} cannot be read ({exc.strerror})") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections (collect:, pairs:, ...)")
    return dict(data or {})
