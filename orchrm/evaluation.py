"""Every metric of a reward model, on held-out tasks only (DESIGN §7), and the promotion gates.

The demo, the benchmarks, the pipeline and the gates all import this module; no metric is
computed anywhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


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
