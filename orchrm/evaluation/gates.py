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
    with no number, e.g. a first candidate with no champion to beat)."""

    name: str
    passed: bool
    value: float | None
    threshold: float | None
    detail: str

    def __str__(self) -> str:
        mark = "pass" if self.passed else "FAIL"
        return f"{mark}  {self.name}: {self.detail}"


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
        out = {f"gate.{g.name}": f"{'pass' if g.passed else 'fail'}: {g.detail}" for g in self.gates}
        out["verdict"] = self.label
        return out

    def to_dict(self) -> dict:
        return {
            "verdict": self.label,
            "gates": [
                {"name": g.name, "passed": g.passed, "value": g.value, "threshold": g.threshold, "detail": g.detail}
                for g in self.gates
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> Verdict:
        return cls(tuple(GateResult(**{k: g[k] for k in ("name", "passed", "value", "threshold", "detail")}) for g in data["gates"]))

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


def check_gates(metrics: Mapping[str, float], gates: GatesConfig, *, champion: Mapping[str, float] | None = None) -> Verdict:
    """The promotion verdict from flat metrics alone (a stored run can be re-gated).

    Gates: ``pairwise_accuracy`` (>= ``min_pairwise_accuracy``), ``best_of_n_gain`` (reward-model
    best-of-``best_of`` minus the random pick, >= ``min_best_of_n_gain``), ``beats_cost_only``
    (reward model > cost-only selector; when enabled), ``scoring_latency`` (p50 <=
    ``max_scoring_latency_ms``) and ``beats_champion`` (reward model > champion's + margin on the
    same pool; passes with "no champion yet" when ``champion`` is None; when enabled). Best-of-N
    figures are expected quality where measured (see :func:`_quality_key`).
    """
    n = gates.best_of
    results: list[GateResult] = []

    key = "pairwise_accuracy"
    if key in metrics:
        v, t = float(metrics[key]), gates.min_pairwise_accuracy
        results.append(GateResult("pairwise_accuracy", v >= t, v, t, f"held-out pairwise accuracy {v:.3f} {'>=' if v >= t else '<'} {t:.3f}"))
    else:
        results.append(_missing("pairwise_accuracy", key))

    rm, rnd = _quality_key(metrics, n, "reward_model"), _quality_key(metrics, n, "random")
    if rm in metrics and rnd in metrics:
        gain, t = float(metrics[rm]) - float(metrics[rnd]), gates.min_best_of_n_gain
        results.append(GateResult("best_of_n_gain", gain >= t, gain, t,
                                  f"{rm} {metrics[rm]:.3f} - random {metrics[rnd]:.3f} = {gain:+.3f} {'>=' if gain >= t else '<'} {t:+.3f}"))
    else:
        results.append(_missing("best_of_n_gain", rm if rm not in metrics else rnd))

    if gates.beat_cost_only:
        cost = _quality_key(metrics, n, "cost_only")
        if rm in metrics and cost in metrics:
            v, t = float(metrics[rm]), float(metrics[cost])
            results.append(GateResult("beats_cost_only", v > t, v, t,
                                      f"{rm} {v:.3f} {'>' if v > t else '<='} cost-only {t:.3f}"))
        else:
            results.append(_missing("beats_cost_only", rm if rm not in metrics else cost))

    key = "scoring_latency_ms_p50"
    if key in metrics:
        v, t = float(metrics[key]), gates.max_scoring_latency_ms
        scored = int(metrics.get("scoring_latency_candidates", n))
        results.append(GateResult("scoring_latency", v <= t, v, t,
                                  f"p50 {v:.1f} ms to score {scored} candidates {'<=' if v <= t else '>'} {t:.1f} ms"))
    else:
        results.append(_missing("scoring_latency", key))

    if gates.beat_champion:
        if champion is None:
            results.append(GateResult("beats_champion", True, None, None, "no champion yet"))
        else:
            ckey = _quality_key(champion, n, "reward_model")
            if rm in metrics and ckey in champion:
                v, c = float(metrics[rm]), float(champion[ckey])
                t = c + gates.champion_margin
                ok = v > t
                margin = f" + margin {gates.champion_margin:.3f}" if gates.champion_margin else ""
                results.append(GateResult("beats_champion", ok, v, t,
                                          f"{rm} {v:.3f} {'>' if ok else '<='} champion {c:.3f}{margin} (same pool)"))
            else:
                results.append(_missing("beats_champion", rm if rm not in metrics else f"champion {ckey}"))
    return Verdict(tuple(results))
