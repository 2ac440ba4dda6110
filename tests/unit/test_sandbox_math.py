"""The math sandbox domain: real arithmetic, seeded runs, and each noise effect of DESIGN §4
shown statistically on hand-written questions (fixed seeds, enough runs to be stable)."""

from __future__ import annotations

import random
import re

import pytest

from orchrm.errors import ConfigError
from orchrm.execution.sandbox.domain import Attempt, Context
from orchrm.execution.sandbox.engine import SandboxBackend
from orchrm.execution.sandbox.noise import GenericNoise, MathNoise, NoiseConfig, TierConfig
from orchrm.execution.tasks.base import Task
from orchrm.execution.tasks.math import load_gsm8k, parse_solution
from orchrm.plans import Plan

BACKEND = SandboxBackend()


def _task(name: str, question: str, solution: str) -> Task:
    meta = parse_solution(question, solution)
    meta["source"] = "test"
    return Task(name, "math", question, solution.rsplit("####", 1)[1].strip(), meta)


EASY = _task("easy", "Ann has 3 apples and buys 4 more. How many apples does she have?",
             "Ann has 3 + 4 = <<3+4=7>>7 apples.\n#### 7")
TRAP = _task("trap", "Eve has 10 stamps. Dee has 4 fewer than twice as many stamps as Eve. How many stamps does Dee have?",
             "Dee has 2 * 10 - 4 = <<2*10-4=16>>16 stamps.\n#### 16")
FACT = _task("fact", "A school orders 3 gross of pencils. How many pencils does it order?",
             "The school orders 3 * 144 = <<3*144=432>>432 pencils.\n#### 432")
LONG = _task(
    "long",
    "Al buys 12 boxes of 24 cans. Each can costs $2. He pays with 3 bills of $500. How much change does he get?",
    "Al buys 12 * 24 = <<12*24=288>>288 cans.\nThe cans cost 288 * 2 = <<288*2=576>>576 dollars.\n"
    "He pays 3 * 500 = <<3*500=1500>>1500 dollars.\nHis change is 1500 - 576 = <<1500-576=924>>924 dollars.\n#### 924",
)


def plan(text: str, tiers=("small", "large")) -> Plan:
    return Plan.parse(text, tiers=tiers)


def node(agent: str, tier: str | None = None, **params) -> str:
    attrs = "".join(f' {k}="{v}"' for k, v in params.items())
    model = f' model="{tier}"' if tier else ""
    return f'<agent id="a1" type="{agent}"{model}{attrs}/>'


def chain(*nodes: str) -> Plan:
    """Nodes (as from :func:`node`, ids renumbered) wired in a line."""
    renamed = [n.replace('id="a1"', f'id="a{i + 1}"') for i, n in enumerate(nodes)]
    edges = [f'<edge from="a{i}" to="a{i + 1}"/>' for i in range(1, len(nodes))]
    return plan("".join(renamed + edges))


def execute(task: Task, p: Plan, seed: int, backend: SandboxBackend = BACKEND) -> dict:
    """One execution of ``p`` node by node (what the executor does), outputs by node id."""
    rng, shared, done = random.Random(seed), {}, {}
    for n in p.nodes:
        done[n.id] = backend.run_node(task, n, [done[q] for q in p.parents(n.id)], rng=rng, shared=shared)
    return done


def accuracy(task: Task, p: Plan, runs: int, *, seed: int = 0, backend: SandboxBackend = BACKEND) -> float:
    total = 0.0
    for r in range(runs):
        out = execute(task, p, seed * 1_000_003 + r, backend)[p.sink]
        total += backend.quality(task, out)
    return total / runs


COT_S, COT_L = plan(node("CoT", "small")), plan(node("CoT", "large"))
SC7_S = plan(node("SelfConsistency", "small", k=7))


# --- mechanics ----------------------------------------------------------------------------------
def test_same_seed_same_execution_and_seeds_differ():
    p = chain(node("WebSearch", queries=2, top_k=3), node("SelfConsistency", "small", k=3), node("Reflexion", "large", iterations=2))
    first = [(o.content, o.answer, o.prompt_tokens, o.completion_tokens) for o in execute(LONG, p, 7).values()]
    again = [(o.content, o.answer, o.prompt_tokens, o.completion_tokens) for o in execute(LONG, p, 7).values()]
    assert first == again
    answers = {execute(LONG, p, s)["a2"].content for s in range(10)}
    assert len(answers) > 1


def test_arithmetic_is_computed_and_errors_carry_forward():
    gold = execute(LONG, COT_L, 0)["a1"]
    lines = [ln for ln in gold.content.splitlines() if "=" in ln]
    for ln in lines:
        lhs, rhs = re.search(r"([\d.]+ [-+*/] [\d.]+) = ([\d.]+)", ln).groups()
        if gold.answer == "924":
            assert eval(lhs) == float(rhs)  # noqa: S307 - digits and one operator, matched above
    # find a small-tier run whose first step went wrong: the next step computes with that value
    for seed in range(500):
        out = execute(LONG, COT_S, seed)["a1"]
        first, second = [ln for ln in out.content.splitlines() if "=" in ln][:2]
        wrong = re.search(r"= ([\d.]+) cans", first).group(1)
        if wrong != "288":
            assert second.startswith(f"The cans cost {wrong} ")
            assert out.answer != "924" or wrong == "288"
            break
    else:
        pytest.fail("no small-tier slip on the first step in 500 runs")


def test_quality_and_vote_key():
    dom = BACKEND.domain(TRAP)
    assert dom.quality(TRAP, "Answer: 16") == 1.0
    assert dom.quality(TRAP, "16.0") == 1.0
    assert dom.quality(TRAP, "24") == 0.0
    assert dom.quality(TRAP, None) == 0.0
    assert dom.quality(Task("x", "math", TRAP.question, None, TRAP.metadata), "16") is None
    ctx = Context(task=TRAP, state=dom.state(TRAP))
    keys = {dom.vote_key(ctx, Attempt(text="", answer=a)) for a in ("16", "16.0", "$16", "Answer: 16")}
    assert keys == {"16"}
    intermediate = execute(TRAP, chain(node("CoT", "large"), node("Reflexion", "small", iterations=1)), 3)["a1"]
    assert BACKEND.quality(TRAP, intermediate) in (0.0, 1.0)


def test_tokens_grow_with_samples_and_rounds():
    def tokens(p: Plan) -> int:
        out = execute(LONG, p, 5)[p.sink]
        return out.prompt_tokens + out.completion_tokens

    assert tokens(plan(node("SelfConsistency", "small", k=7))) > 2 * tokens(plan(node("SelfConsistency", "small", k=3)))
    assert tokens(plan(node("Debate", "small", agents=3, rounds=2))) > tokens(plan(node("Debate", "small", agents=3, rounds=1)))
    cot = execute(LONG, COT_S, 5)["a1"]
    assert cot.completion_tokens > 10 * 4, "a few lines of reasoning per step"


def test_retrieval_is_real_bm25_and_scored_by_fact_recall():
    ws = plan(node("WebSearch", queries=1, top_k=3))
    found = execute(FACT, ws, 0)["a1"]
    assert "fact-gross" in [d.doc_id for d in found.state.docs]
    assert "144" in found.content
    assert BACKEND.quality(FACT, found) == 1.0
    assert BACKEND.quality(LONG, execute(LONG, ws, 0)["a1"]) is None, "no fact needed: recall undefined"


def test_gold_replay_matches_every_gsm8k_answer(data_dir):
    if not (data_dir / "gsm8k" / "test.jsonl").is_file():
        pytest.skip("GSM8K not found; set ORCHRM_DATA_DIR to the folder holding gsm8k/test.jsonl")
    exact = MathNoise(step_error=0.0, op_error={}, digit_error={}, decimal_error=0.0, trap_misread={},
                      fact_miss={"small": 0.0, "large": 0.0})
    backend = SandboxBackend(NoiseConfig(math=exact))
    tasks = load_gsm8k(2000, seed=0)
    assert all(backend.quality(t, execute(t, COT_S, 0, backend)["a1"]) == 1.0 for t in tasks)


def test_a_tier_missing_from_the_math_tables_is_named():
    tiers = {"small": TierConfig(), "large": TierConfig(cost_weight=5, skill=0.35), "medium": TierConfig(cost_weight=2, skill=0.6)}
    generic = GenericNoise(debate_conform={"small": 0.7, "large": 0.5, "medium": 0.6},
                           overcorrect={"small": 0.12, "large": 0.02, "medium": 0.06})
    backend = SandboxBackend(NoiseConfig(tiers=tiers, generic=generic))
    p = plan(node("CoT", "medium"), tiers=tuple(tiers))
    with pytest.raises(ConfigError, match=r"sandbox\.math\.trap_tier has no value for tier 'medium'"):
        execute(TRAP, p, 0, backend)


def test_noise_tables_reject_unknown_kinds():
    with pytest.raises(ValueError, match="unknown trap kind"):
        MathNoise(trap_misread={"twice_minu": 0.5})
    with pytest.raises(ValueError, match="operators"):
        MathNoise(op_error={"x": 0.1})


# --- the noise effects of DESIGN §4 -------------------------------------------------------------
def test_trap_misreads_are_shared_by_every_sample_of_a_tier():
    misread = "2 * 10 + 4"
    for seed in range(60):
        samples = execute(TRAP, plan(node("SelfConsistency", "small", k=5)), seed)["a1"].content.split("Sample ")[1:]
        fooled = [misread in s for s in samples]
        assert all(fooled) or not any(fooled)


def test_voting_cannot_fix_a_trap_but_a_stronger_tier_or_a_tool_check_can():
    cot, sc7 = accuracy(TRAP, COT_S, 800), accuracy(TRAP, SC7_S, 800)
    misread = MathNoise().trap_misread["twice_minus"]
    assert sc7 <= 1 - misread + 0.06, "seven votes of a tier that misreads still misread"
    long_cot, long_sc7 = accuracy(LONG, COT_S, 800), accuracy(LONG, SC7_S, 800)
    assert long_sc7 - long_cot > 0.15, "on independent slips votes do help"
    assert sc7 - cot < (long_sc7 - long_cot) - 0.08
    assert accuracy(TRAP, COT_L, 800) > sc7 + 0.2
    checked = chain(node("CoT", "small"), node("Reflexion", "large", iterations=2))
    assert accuracy(TRAP, checked, 800) > sc7 + 0.15


def test_debate_entrenches_a_shared_misreading_and_helps_on_slips():
    debate = plan(node("Debate", "small", agents=3, rounds=2))
    misread = MathNoise().trap_misread["twice_minus"]
    assert accuracy(TRAP, debate, 600) <= 1 - misread + 0.06
    assert accuracy(LONG, debate, 600) > accuracy(LONG, COT_S, 600) + 0.1


def test_small_reflexion_over_corrects_easy_questions():
    cot = accuracy(EASY, COT_S, 1500)
    assert cot > 0.88
    assert accuracy(EASY, plan(node("Reflexion", "small", iterations=2)), 1500) < cot - 0.04
    assert accuracy(EASY, plan(node("Reflexion", "large", iterations=2)), 1500) > cot


def test_retrieval_helps_knowledge_questions_and_distracts_the_others():
    search_then = chain(node("WebSearch", queries=1, top_k=2), node("CoT", "small"))
    cot_fact = accuracy(FACT, COT_S, 600)
    assert accuracy(FACT, search_then, 600) > cot_fact + 0.3
    assert accuracy(FACT, search_then, 600) > accuracy(FACT, COT_L, 600), "a cheap search beats recalling with a big model"
    broad = chain(node("WebSearch", queries=3, top_k=8), node("CoT", "small"))
    assert accuracy(LONG, broad, 1500) < accuracy(LONG, COT_S, 1500) - 0.04
