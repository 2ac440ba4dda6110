"""The sandbox multi-agent system: every agent type, no LLM needed (DESIGN §4).

``make_domain(name, noise)`` returns the domain simulator for a task's domain; tasks that carry
no simulation metadata (free text, a user's own domain) get :class:`GenericDomain`.
"""

from __future__ import annotations

import importlib

from orchrm.agents.sandbox.domain import Attempt, Context, Doc, Retrieval, SandboxDomain
from orchrm.agents.sandbox.engine import SandboxBackend
from orchrm.sandbox_config import NoiseConfig

# domain name -> "module:Class"; imported on first use so nothing heavy loads at import time
DOMAINS: dict[str, str] = {
    "math": "orchrm.agents.sandbox.math:MathDomain",
    "code": "orchrm.agents.sandbox.code:CodeDomain",
    "multihop": "orchrm.agents.sandbox.multihop:MultihopDomain",
    "webqa": "orchrm.agents.sandbox.webqa:WebqaDomain",
    "generic": "orchrm.agents.sandbox.generic:GenericDomain",
}


def make_domain(name: str, noise: NoiseConfig) -> SandboxDomain:
    target = DOMAINS.get(name, DOMAINS["generic"])
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)(noise)


__all__ = [
    "DOMAINS",
    "Attempt",
    "Context",
    "Doc",
    "NoiseConfig",
    "Retrieval",
    "SandboxBackend",
    "SandboxDomain",
    "make_domain",
]
