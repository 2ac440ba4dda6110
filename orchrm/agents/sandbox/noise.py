"""Every noise parameter of the sandbox, documented in one place.

The sandbox (DESIGN §4) computes what can be computed (arithmetic, code execution, BM25) and
models with seeded randomness only what an LLM would think. This file holds all of those
probabilities and weights, grouped by where they act:

- :class:`TierConfig` — what a model tier costs and how skilled it is;
- :class:`GenericNoise` — behaviour shared by every domain (debate conformity, over-correction);
- one class per domain — the effects that make the best plan depend on the question.

The values are set once from first principles and a look at the sandbox's own statistics on the
built-in generators; they are never tuned to make a benchmark figure look better. Change them
in YAML under ``sandbox:`` (see ``configs/default.yaml``); unknown keys are rejected.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

Prob = Field(ge=0.0, le=1.0)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TierConfig(_Frozen):
    """A model tier. ``cost_weight`` multiplies its tokens in the ``cost`` column (price ratio);
    ``skill`` in (0, 1] scales every per-step error probability of the domains (lower is better:
    an error rate ``p`` becomes ``p * skill``)."""

    cost_weight: float = Field(1.0, gt=0)
    skill: float = Field(1.0, gt=0, le=1.0)


def _default_tiers() -> dict[str, TierConfig]:
    return {
        "small": TierConfig(cost_weight=1.0, skill=1.0),
        "large": TierConfig(cost_weight=5.0, skill=0.35),
    }


class GenericNoise(_Frozen):
    """Agent behaviour shared by all domains.

    - ``debate_conform``: per debate round, the chance that a debater holding a minority answer
      adopts the majority's (Debate converges, right or wrong); otherwise it critiques its own
      answer without tools.
    - ``overcorrect``: per Reflexion iteration, the chance that a tier "fixes" a correct answer
      into a wrong one (hurts on easy questions).
    - ``confidence_noise``: standard deviation of the agents' self-reported confidence around
      their true chance of being right (the trajectory-level selector reads it).
    """

    debate_conform: dict[str, float] = Field(default_factory=lambda: {"small": 0.7, "large": 0.5})
    overcorrect: dict[str, float] = Field(default_factory=lambda: {"small": 0.12, "large": 0.02})
    confidence_noise: float = Field(0.2, ge=0.0)


class MathNoise(_Frozen):
    """math (GSM8K style). Owned by the math domain; see orchrm/agents/sandbox/math.py."""


class CodeNoise(_Frozen):
    """code (HumanEval). Owned by the code domain; see orchrm/agents/sandbox/code.py."""


class MultihopNoise(_Frozen):
    """multihop (knowledge graph / StrategyQA). See orchrm/agents/sandbox/multihop.py."""


class WebqaNoise(_Frozen):
    """webqa (built-in corpus / SQuAD). See orchrm/agents/sandbox/webqa.py."""


class NoiseConfig(_Frozen):
    """All sandbox parameters. ``tiers`` must name every tier used by ``generic``'s tables."""

    tiers: dict[str, TierConfig] = Field(default_factory=_default_tiers)
    generic: GenericNoise = Field(default_factory=GenericNoise)
    math: MathNoise = Field(default_factory=MathNoise)
    code: CodeNoise = Field(default_factory=CodeNoise)
    multihop: MultihopNoise = Field(default_factory=MultihopNoise)
    webqa: WebqaNoise = Field(default_factory=WebqaNoise)

    @model_validator(mode="after")
    def _tiers_cover_tables(self) -> NoiseConfig:
        for name in ("debate_conform", "overcorrect"):
            table = getattr(self.generic, name)
            missing = set(self.tiers) - set(table)
            if missing:
                raise ValueError(f"generic.{name} has no value for tier(s) {', '.join(sorted(missing))}")
        return self

    def tier(self, name: str) -> TierConfig:
        return self.tiers[name]
