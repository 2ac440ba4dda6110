"""The sandbox's noise parameters, re-exported from :mod:`orchrm.execution.sandbox.config`, where they live.

They are configuration, not simulation: ``orchrm.config`` reads them without importing the
sandbox. Import them from either module; the classes are the same objects.
"""

from __future__ import annotations

from orchrm.execution.sandbox.config import (
    MATH_TRAP_KINDS,
    CodeNoise,
    GenericNoise,
    MathNoise,
    MultihopNoise,
    NoiseConfig,
    QaNoise,
    TierConfig,
    WebqaNoise,
)

__all__ = [
    "MATH_TRAP_KINDS",
    "CodeNoise",
    "GenericNoise",
    "MathNoise",
    "MultihopNoise",
    "NoiseConfig",
    "QaNoise",
    "TierConfig",
    "WebqaNoise",
]
