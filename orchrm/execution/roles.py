"""Named agent roles: a role is an agent type with a default tier, parameters and a prompt.

Users describe their system by roles (DESIGN §12: ``MultiAgentExecutor(agents=["math_parser",
"strategy_selector", "calculator"])``); plans then carry ``role="..."`` on each node and the
backend prefixes the role's prompt. Register your own with :func:`register_role`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from orchrm.plans import AGENT_TYPES


@dataclass(frozen=True)
class Role:
    name: str
    agent: str
    params: Mapping[str, str | int] = field(default_factory=dict)
    prompt: str = ""


_ROLES: dict[str, Role] = {}


def register_role(name: str, agent: str, params: Mapping[str, str | int], prompt: str) -> Role:
    """Add (or replace) a role. ``agent`` must be a known agent type."""
    if agent not in AGENT_TYPES:
        raise ValueError(f"role {name!r}: unknown agent type {agent!r}; use one of {', '.join(AGENT_TYPES)}")
    role = Role(name, agent, MappingProxyType(dict(params)), prompt)
    _ROLES[name] = role
    return role


def get_role(name: str) -> Role:
    role = _ROLES.get(name)
    if role is None:
        raise ValueError(f"unknown agent role {name!r}; known roles: {', '.join(sorted(_ROLES))}; add one with register_role()")
    return role


def roles() -> Mapping[str, Role]:
    return MappingProxyType(_ROLES)


for _name, _agent, _params, _prompt in (
    ("math_parser", "CoT", {"model": "small"}, "Parse the problem into quantities, units and the unknown."),
    ("strategy_selector", "Debate", {"model": "small", "agents": 2, "rounds": 1}, "Argue for a solution strategy and settle on one."),
    ("calculator", "Reflexion", {"model": "large", "iterations": 2}, "Compute every step with a calculator and check each result."),
    ("solver", "CoT", {"model": "large"}, "Solve the task step by step."),
    ("voter", "SelfConsistency", {"model": "small", "k": 5}, "Solve independently several times and vote."),
    ("verifier", "Reflexion", {"model": "large", "iterations": 1}, "Check the draft answer and repair it if it is wrong."),
    ("searcher", "WebSearch", {"queries": 2, "top_k": 5}, "Write search queries for the facts the task needs."),
    ("coder", "CoT", {"model": "small"}, "Write a Python function that satisfies the docstring."),
    ("tester", "Reflexion", {"model": "small", "iterations": 2}, "Run the docstring examples and fix the code until they pass."),
    ("reader", "CoT", {"model": "small"}, "Read the documents and extract the answer span."),
):
    register_role(_name, _agent, _params, _prompt)
