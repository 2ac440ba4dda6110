"""The promotion verdict: every gate's figure against its threshold (DESIGN §7).

:func:`check_gates` reads the flat metrics alone, so a stored verdict can be re-checked later
from the metrics recorded on a registered version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orchrm.config import GatesConfig

# ---------------------------------------------------------------------------------------------
# the verdict


@dataclass(frozen=True)
class GateResult:
    """One gate's outcome: ``value`` measured against ``threshold`` (None where the gate compares
    with no number, e.g. a first candidate with no champion to beat). A gate that does not apply
    (``applicable`` False: its figure cannot exist on this pool, ``detail`` says why) passes:
    it neither blocks nor vouches for the candidate."""

    name: str
    passed: bool
    value: float | None
    threshold: float | None
    detail: str
    applicable: bool = True

    @property
    def mark(self) -> str:
        """``pass``, ``FAIL`` or ``n/a``."""
        return "n/a" if not self.applicable else "pass" if self.passed else "FAIL"

    def __str__(self) -> str:
        return f"{self.mark:<4}  {self.name}: {self.detail}"


@dataclass(frozen=True)
class Verdict:
    """Every gate of one candidate. ``passed`` only when every gate passed."""

    gates: tuple[GateResult, ...]

    @property
    def passed(self) -> bool:
        return bool(self.gates) and all(g.passed for g in self.gates)

    @property
    def label(self) -> str:
        return "promoted" if self.passed else "rejected"

    def failed(self) -> tuple[GateResult, ...]:
        return tuple(g for g in self.gates if not g.passed)

    def tags(self) -> dict[str, str]:
        """MLflow version tags: ``gate.<name>`` -> ``"pass: <detail>"`` / ``"fail: <detail>"``, and
        ``verdict``."""
        out = {f"gate.{g.name}": f"{g.mark.lower()}: {g.detail}" for g in self.gates}
        out["verdict"] = self.label
        return out

    def to_dict(self) -> dict:
        return {
            "verdict": self.label,
            "gates": [
                {"name": g.name, "passed": g.passed, "value": g.value, "threshold": g.threshold, "detail": g.detail,
                 "applicable": g.applicable}
                for g in self.gates
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> Verdict:
        return cls(tuple(GateResult(**{k: g[k] for k in ("name", "passed", "value", "threshold", "detail")},
                                    applicable=bool(g.get("applicable", True))) for g in data["gates"]))

    def __str__(self) -> str:
        return "\n".join([f"verdict: {self.label}", *(f"  {g}" for g in self.gates)])


# ---------------------------------------------------------------------------------------------
# gates


def _quality_key(metrics: Mapping[str, float], n: int, selector: str) -> str:
    """The best-of-N figure gates compare: expected quality of the pick when the pool measured it
    (less luck than one realised draw), else the realised quality."""
    key = f"expected.best_of_{n}.{selector}"
    return key if key in metrics else f"best_of_{n}.{selector}"


def _missing(name: str, key: str) -> GateResult:
    return GateResult(name, False, None, None, f"{key} missing from the metrics: evaluate the model again")


#: why the best-of-N gates do not apply to a pool without best-of-N
NO_BEST_OF_N = "not applicable: no held-out task has two distinct plans (tasks with one plan each), so no best-of-N; pairwise gates only"


def _not_applicable(name: str, reason: str = NO_BEST_OF_N) -> GateResult:
    return GateResult(name, True, None, None, reason, applicable=False)


def gates_n(metrics: Mapping[str, float], gates: GatesConfig) -> int:
    """The N the best-of-N gates read: ``gates.best_of``, or fewer where the pool's tasks have
    fewer candidates (``pool_candidates``, a replay pool of a user's own plans)."""
    have = metrics.get("pool_candidates")
    return gates.best_of if have is None or have < 2 else min(gates.best_of, int(have))


#: prefix of the paired candidate-minus-champion metrics (:func:`orchrm.evaluation.harness.evaluate` writes them)
CHAMPION_DELTA = "champion_delta"
#: prefix of the champion's own metrics logged in a candidate's run (same pool, same run)
CHAMPION_PREFIX = "champion."


def champion_delta_key(metrics: Mapping[str, float], n: int, *, no_pool: bool) -> str:
    """The paired difference ``beats_champion`` reads: of the expected quality of the best-of-N
    pick where measured (as :func:`_quality_key`), else the realised one; of held-out pairwise
    correctness for a pool without best-of-N."""
    if no_pool:
        return f"{CHAMPION_DELTA}.pairwise_accuracy"
    expected, realised = f"{CHAMPION_DELTA}.expected.best_of_{n}", f"{CHAMPION_DELTA}.best_of_{n}"
    if expected in metrics or realised in metrics:
        return expected if expected in metrics else realised
    # neither: name the one the quality gates read, for the "missing" message
    return expected if _quality_key(metrics, n, "reward_model").startswith("expected.") else realised


def describe_delta(key: str) -> str:
    """What the paired difference ``key`` measures, in words."""
    if key.endswith(".pairwise_accuracy"):
        return "held-out pairwise accuracy on the same pairs (the pool has no best-of-N)"
    n = key.rsplit("best_of_", 1)[1]
    return f"{'expected' if '.expected.' in key else 'realised'} quality of the best-of-{n} pick on the same pool tasks"


#: per-domain task counts of the pool (``pool_tasks.<domain>``), one for every domain it had to cover
POOL_TASKS_PREFIX = "pool_tasks."


def _pool_domains(metrics: Mapping[str, float]) -> GateResult | None:
    """``pool_domains``: every domain the pool had to cover (the collected ones) has a held-out
    task in it, so no domain passes the gates unevaluated. None (no gate) where the metrics hold
    no per-domain counts (a replay pool covers whatever the traces hold)."""
    counts = {k.removeprefix(POOL_TASKS_PREFIX): int(v) for k, v in metrics.items() if k.startswith(POOL_TASKS_PREFIX)}
    if not counts:
        return None
    empty = sorted(d for d, n in counts.items() if n == 0)
    listed = ", ".join(f"{d} {n}" for d, n in sorted(counts.items()))
    if empty:
        return GateResult("pool_domains", False, float(len(empty)), 0.0,
                          f"no held-out task of {', '.join(empty)} in the pool ({listed} tasks): its figures say nothing "
                          "of that domain. Collect fewer tasks of it, raise evaluate.tasks_per_domain, or leave it out of "
                          "collect.domains")
    return GateResult("pool_domains", True, 0.0, 0.0, f"every collected domain has held-out tasks ({listed})")


def _beats_champion(metrics: Mapping[str, float], gates: GatesConfig, n: int, *, no_pool: bool) -> GateResult:
    """``beats_champion``: the lower bound of the paired bootstrap interval of (candidate -
    champion) must exceed ``champion_margin``; a difference whose interval reaches the margin
    (e.g. straddles 0) keeps the champion, whatever the two means."""
    key = champion_delta_key(metrics, n, no_pool=no_pool)
    if any(k not in metrics for k in (key, f"{key}.ci_low", f"{key}.ci_high")):
        return GateResult("beats_champion", False, None, None,
                          f"{key} missing from the metrics: evaluate the model again against the champion (the paired "
                          "difference is measured in the same run, on the same pool)")
    mean, lo, hi, t = float(metrics[key]), float(metrics[f"{key}.ci_low"]), float(metrics[f"{key}.ci_high"]), gates.champion_margin
    ok = lo > t
    tasks = int(metrics.get(f"{key}.tasks", 0))
    interval = ("no bootstrap (evaluate.bootstrap 0): the interval is the mean itself" if metrics.get(f"{key}.resamples") == 0
                else "95% paired bootstrap over tasks")
    return GateResult("beats_champion", ok, lo, t,
                      f"candidate - champion, {describe_delta(key)}: mean {mean:+.3f} [{lo:+.3f}, {hi:+.3f}] "
                      f"({interval}; {tasks} tasks); lower bound {lo:+.3f} {'>' if ok else '<='} margin {t:.3f}")


def check_gates(metrics: Mapping[str, float], gates: GatesConfig, *, champion: Mapping[str, float] | None = None) -> Verdict:
    """The promotion verdict from flat metrics alone (a stored run can be re-gated).

    Gates: ``pairwise_accuracy`` (>= ``min_pairwise_accuracy``), ``best_of_n_gain`` (reward-model
    best-of-``best_of`` minus the random pick, >= ``min_best_of_n_gain``), ``beats_cost_only``
    (reward model > cost-only selector; when enabled), ``scoring_latency`` (p50 <=
    ``max_scoring_latency_ms``) and ``beats_champion`` (the lower bound of the paired bootstrap
    interval of candidate minus champion on the same pool, ``champion_delta.*`` in ``metrics``,
    > ``champion_margin``; passes with "no champion yet" when ``champion`` is None, which is
    otherwise the champion's metrics of the same run; when enabled), and ``pool_domains`` (every
    collected domain has held-out tasks in the pool; where the metrics hold ``pool_tasks.<domain>``
    counts, as a sandbox pool's do). Best-of-N figures are
    expected quality where measured (see :func:`_quality_key`), at :func:`gates_n`.

    A pool without best-of-N (``pool_tasks`` 0: no held-out task with two distinct plans) leaves
    the pairwise gates alone: ``best_of_n_gain``, ``beats_cost_only`` and ``scoring_latency`` are
    reported as not applicable (they pass, with the reason), ``beats_champion`` reads the paired
    difference of held-out pairwise correctness instead.
    """
    n = gates_n(metrics, gates)
    no_pool = metrics.get("pool_tasks") == 0
    results: list[GateResult] = []

    key = "pairwise_accuracy"
    if key in metrics:
        v, t = float(metrics[key]), gates.min_pairwise_accuracy
        results.append(GateResult("pairwise_accuracy", v >= t, v, t, f"held-out pairwise accuracy {v:.3f} {'>=' if v >= t else '<'} {t:.3f}"))
    else:
        results.append(_missing("pairwise_accuracy", key))

    rm, rnd = _quality_key(metrics, n, "reward_model"), _quality_key(metrics, n, "random")
    if no_pool:
        results.append(_not_applicable("best_of_n_gain"))
    elif rm in metrics and rnd in metrics:
        gain, t = float(metrics[rm]) - float(metrics[rnd]), gates.min_best_of_n_gain
        results.append(GateResult("best_of_n_gain", gain >= t, gain, t,
                                  f"{rm} {metrics[rm]:.3f} - random {metrics[rnd]:.3f} = {gain:+.3f} {'>=' if gain >= t else '<'} {t:+.3f}"))
    else:
        results.append(_missing("best_of_n_gain", rm if rm not in metrics else rnd))

    if gates.beat_cost_only:
        cost = _quality_key(metrics, n, "cost_only")
        if no_pool:
            results.append(_not_applicable("beats_cost_only"))
        elif rm in metrics and cost in metrics:
            v, t = float(metrics[rm]), float(metrics[cost])
            results.append(GateResult("beats_cost_only", v > t, v, t,
                                      f"{rm} {v:.3f} {'>' if v > t else '<='} cost-only {t:.3f}"))
        else:
            results.append(_missing("beats_cost_only", rm if rm not in metrics else cost))

    key = "scoring_latency_ms_p50"
    if no_pool:
        results.append(_not_applicable("scoring_latency", "not applicable: no held-out task has two distinct plans to score side by side"))
    elif key in metrics:
        v, t = float(metrics[key]), gates.max_scoring_latency_ms
        scored = int(metrics.get("scoring_latency_candidates", n))
        results.append(GateResult("scoring_latency", v <= t, v, t,
                                  f"p50 {v:.1f} ms to score {scored} candidates {'<=' if v <= t else '>'} {t:.1f} ms"))
    else:
        results.append(_missing("scoring_latency", key))

    covered = _pool_domains(metrics)
    if covered is not None:
        results.append(covered)

    if gates.beat_champion:
        if champion is None:
            results.append(GateResult("beats_champion", True, None, None, "no champion yet"))
        else:
            results.append(_beats_champion(metrics, gates, n, no_pool=no_pool))
    return Verdict(tuple(results))
