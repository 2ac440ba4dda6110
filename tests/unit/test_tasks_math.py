"""math task sources: the generator, the GSM8K loader, question features and the heuristic."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from orchrm.errors import TaskError
from orchrm.execution.tasks import load_tasks, sources
from orchrm.execution.tasks.math import (
    FACTS,
    answer_match,
    eval_expr,
    facts_in,
    fmt_number,
    from_text,
    heuristic_plan_score,
    load_builtin,
    load_gsm8k,
    normalize_number,
    parse_solution,
    question_features,
    traps_in,
)
from orchrm.plans import Plan

JANET_Q = (
    "Janet’s ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins for her "
    "friends every day with four. She sells the remainder at the farmers' market daily for $2 per fresh duck egg. "
    "How much in dollars does she make every day at the farmers' market?"
)
JANET_A = (
    "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n"
    "She makes 9 * 2 = $<<9*2=18>>18 every day at the farmer’s market.\n#### 18"
)


def _arg(code: str, steps: list[dict]) -> float:
    kind, ref = code.split(":", 1)
    if kind == "s":
        return steps[int(ref)]["result"]
    return FACTS[ref].value if kind == "f" else float(ref)


def _computational(task) -> list[dict]:
    return [s for s in task.metadata["steps"] if s["expr"]]


# --- the built-in generator -------------------------------------------------------------------
def test_builtin_is_seeded_and_prefix_stable():
    a, b = load_builtin(15, seed=3), load_builtin(15, seed=3)
    assert [t.to_row() for t in a] == [t.to_row() for t in b]
    assert [t.task_id for t in load_builtin(5, seed=3)] == [t.task_id for t in a[:5]]
    assert {t.question for t in load_builtin(15, seed=4)}.isdisjoint({t.question for t in a})


def test_builtin_tasks_are_valid_worked_problems():
    tasks = load_builtin(150, seed=0)
    assert len({t.task_id for t in tasks}) == len(tasks)
    for t in tasks:
        steps = t.metadata["steps"]
        comp = _computational(t)
        assert 2 <= len(comp) <= 8, t.question
        for i, s in enumerate(steps):
            for code in s["args"]:
                if code.startswith("s:"):
                    assert int(code[2:]) < i, "a step may only use earlier results"
            value = eval_expr(s["expr"], [_arg(c, steps) for c in s["args"]])
            assert value == pytest.approx(s["result"])
            assert s["trap"] == "" or s["alt"], "a trap step carries its misread computation"
        # the reference is the answer step's result, and the GSM8K text says the same
        assert float(t.reference) == pytest.approx(steps[t.metadata["answer_step"]]["result"])
        assert t.metadata["solution"].rsplit("####", 1)[1].strip() == t.reference
        assert len(re.findall(r"<<[^>]*=[^>]*>>", t.metadata["solution"])) == len(comp)
        for f in t.metadata["facts"]:
            assert f in facts_in(t.question), f"fact {f} must be cued by the question's words"


def test_builtin_solutions_parse_back_to_the_same_steps():
    # the GSM8K parser and the generator agree: one step representation for both sources
    for t in load_builtin(60, seed=1):
        parsed = parse_solution(t.question, t.metadata["solution"])
        assert [s["result"] for s in parsed["steps"]] == pytest.approx([s["result"] for s in t.metadata["steps"]])
        assert parsed["answer_step"] == t.metadata["answer_step"]


def test_builtin_has_the_visible_variety_that_matters():
    tasks = load_builtin(300, seed=2)
    steps = Counter(len(_computational(t)) for t in tasks)
    assert set(steps) == set(range(2, 9))
    traps = Counter(s["trap"] for t in tasks for s in t.metadata["steps"] if s["trap"])
    assert {"fewer_than", "twice_minus", "how_many_more", "percent_of_percent", "of_remaining"} <= set(traps)
    facts = Counter(f for t in tasks for f in t.metadata["facts"])
    assert {"dozen", "gross", "fortnight", "leap_year"} <= set(facts)
    assert len({t.metadata["template"] for t in tasks}) == 6
    assert any(question_features(t.question)["max_digits"] >= 3 for t in tasks)
    assert sum(not t.metadata["traps"] for t in tasks) > 50, "plain questions exist too"


def test_registered_sources_load_through_the_registry():
    assert {("math", "builtin"), ("math", "gsm8k")} <= set(sources())
    tasks = load_tasks("math", 4, seed=7)
    assert [t.domain for t in tasks] == ["math"] * 4


# --- GSM8K --------------------------------------------------------------------------------------
def test_parse_solution_links_operands_to_their_sources():
    meta = parse_solution(JANET_Q, JANET_A)
    assert [(s["expr"], s["args"], s["result"]) for s in meta["steps"]] == [
        ("{0}-{1}-{2}", ["q:16", "q:3", "q:4"], 9.0),
        ("{0}*{1}", ["s:0", "q:2"], 18.0),
    ]
    assert meta["steps"][1]["text"] == "She makes {calc} every day at the farmer’s market."
    assert meta["answer_step"] == 1 and meta["answer"] == 18


def test_parse_solution_finds_unstated_facts_prose_arithmetic_and_traps():
    q = "Kim buys 3 dozen eggs and uses 5 fewer eggs than she bought for a cake. How many eggs are left?"
    sol = "Kim buys 3 * 12 = <<3*12=36>>36 eggs.\nShe uses 36 - 5 = <<36-5=31>>31 eggs.\nSo 36 - 31 = 5 eggs are left.\n#### 5"
    meta = parse_solution(q, sol)
    steps = meta["steps"]
    assert steps[0]["args"] == ["q:3", "f:dozen"] and meta["facts"] == ["dozen"]
    assert steps[1]["trap"] == "fewer_than" and steps[1]["alt"] == "{0}+{1}"
    assert steps[2]["expr"] == "{0}-{1}" and steps[2]["args"] == ["s:0", "s:1"], "unannotated prose arithmetic is a step"
    assert meta["answer_step"] == 2
    text_only = parse_solution("Ann has 2 cats.", "Let x be the answer.\nx = 2\n#### 2")
    assert [s["expr"] for s in text_only["steps"]] == ["", ""] and text_only["answer_step"] == -1


def test_parse_solution_needs_a_final_answer_line():
    with pytest.raises(TaskError, match="####"):
        parse_solution("Q?", "2 + 2 = <<2+2=4>>4")


def test_gsm8k_loader_reads_the_real_test_split(data_dir):
    path = data_dir / "gsm8k" / "test.jsonl"
    if not path.is_file():
        pytest.skip(f"GSM8K not found at {path}; set ORCHRM_DATA_DIR to the folder holding gsm8k/test.jsonl")
    every = load_gsm8k(5000, seed=0)
    assert len(every) == 1319
    first = every[0]
    assert first.task_id == "gsm8k-0000" and first.reference == "18"
    assert first.question.startswith("Janet")
    assert sum(len(_computational(t)) for t in every) / len(every) > 2.5
    assert sum(t.metadata["answer_step"] >= 0 for t in every) / len(every) > 0.9
    sample = load_gsm8k(25, seed=3)
    assert [t.task_id for t in sample] == [t.task_id for t in load_gsm8k(25, seed=3)]
    assert [t.task_id for t in sample] != [t.task_id for t in load_gsm8k(25, seed=4)]


def test_gsm8k_loader_says_how_to_point_to_the_file(monkeypatch, tmp_path):
    monkeypatch.setenv("ORCHRM_DATA_DIR", str(tmp_path))
    with pytest.raises(TaskError, match=r"gsm8k/test\.jsonl.*ORCHRM_DATA_DIR"):
        load_gsm8k(3)
    monkeypatch.delenv("ORCHRM_DATA_DIR")
    with pytest.raises(TaskError, match="ORCHRM_DATA_DIR is not set"):
        load_gsm8k(3)


def test_gsm8k_loader_rejects_a_foreign_file(tmp_path):
    bad = tmp_path / "test.jsonl"
    bad.write_text('{"prompt": "hi"}\n')
    with pytest.raises(TaskError, match="question.*answer"):
        load_gsm8k(1, path=bad)


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ({"question": "How many?", "answer": "Two apples."}, r"test\.jsonl:2: .*####"),  # no final answer line
        ({"question": None, "answer": "#### 2"}, r"test\.jsonl:2: not a GSM8K item .*must be text"),
    ],
)
def test_a_malformed_gsm8k_row_is_named_by_file_and_line(tmp_path, row, match):
    bad = tmp_path / "test.jsonl"
    good = {"question": "What is 1 + 1?", "answer": "1 + 1 = <<1+1=2>>2\n#### 2"}
    bad.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(TaskError, match=match):
        load_gsm8k(1, path=bad)


def test_asking_for_more_tasks_than_a_data_set_holds_warns(data_dir, monkeypatch, caplog):
    if not (data_dir / "gsm8k" / "test.jsonl").is_file():
        pytest.skip("GSM8K not found; set ORCHRM_DATA_DIR to the folder holding gsm8k/test.jsonl")
    monkeypatch.setenv("ORCHRM_DATA_DIR", str(data_dir))
    with caplog.at_level("WARNING", logger="orchrm.execution.tasks"):
        tasks = load_tasks("math", 5000, source="gsm8k")
    assert len(tasks) == 1319 and "task source math:gsm8k holds 1319 tasks; asked for 5000" in caplog.text


def test_gsm8k_samples_grow_without_replacing_items(data_dir):
    path = data_dir / "gsm8k" / "test.jsonl"
    if not path.is_file():
        pytest.skip(f"GSM8K not found at {path}; set ORCHRM_DATA_DIR to the folder holding gsm8k/test.jsonl")
    ids = {n: {t.task_id for t in load_gsm8k(n, seed=2)} for n in (100, 341, 342, 900)}
    assert ids[100] <= ids[341] <= ids[342] <= ids[900]  # random.sample changes its method near n = 342


# --- scorers ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("answer", "reference", "expected"),
    [
        ("Answer: 18", "18", 1.0),
        ("So she makes $1,234.00 a day.", "1234", 1.0),
        ("18.0", "18", 1.0),
        ("Answer: 2.5", "2.5", 1.0),
        ("17", "18", 0.0),
        ("18.5", "18", 0.0),
        ("no idea", "18", 0.0),
        (None, "18", 0.0),
    ],
)
def test_answer_match(answer, reference, expected):
    assert answer_match(answer, reference) == expected


@pytest.mark.parametrize(
    ("text", "key"),
    [("18", "18"), ("18.0", "18"), ("$18", "18"), ("Answer: 1,200", "1200"), ("0.50", "0.5"), ("none", None)],
)
def test_normalize_number_is_the_vote_key(text, key):
    assert normalize_number(text) == key


# --- free text ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "reference", "steps"),
    [
        ("What is 48 / 2 + 3?", "27", 2),
        ("Calculate (12 + 8) * 3 - 4", "56", 3),
        ("What is 15% of 80?", "12", 2),
        ("What is the sum of 3 and 4 times 2?", "14", 2),
    ],
)
def test_from_text_builds_a_simulable_task(text, reference, steps):
    task = from_text(text)
    assert task is not None and task.domain == "math"
    assert task.reference is None, "a user's question has no gold answer"
    assert fmt_number(task.metadata["answer"]) == reference
    assert len(_computational(task)) == steps


@pytest.mark.parametrize(
    "text",
    ["Solve: integral of x^2 from 0 to 1", "Answer: what is the capital of France?", "Tom has some apples. How many?"],
)
def test_from_text_declines_what_it_cannot_compute(text):
    assert from_text(text) is None


@pytest.mark.parametrize(
    ("text", "reference"),
    [
        ("What is -5 + 3?", "-2"),
        ("What is 5 * -2 + 1?", "-9"),
        ("What is 3 - -2?", "5"),
        ("What is (-4) * (2 + 1)?", "-12"),
    ],
)
def test_from_text_reads_negative_numbers(text, reference):
    task = from_text(text)
    assert task is not None
    assert fmt_number(task.metadata["answer"]) == reference
    assert task.metadata["solution"].endswith(f"#### {reference}")


@pytest.mark.parametrize(
    "text",
    [
        "What is 1e5 + 1?",  # scientific notation: the regex would see only "5 + 1"
        "What is 2 + 1e5?",
        "What is 1e308 * 10?",
        "What is x-5+3?",  # algebra, not arithmetic
        "What is COVID-19 + 1?",
        "What is 1,000 + 5?",  # digit grouping: the regex would see only "000 + 5"
        "What is 2^3 + 1?",
        "Solve 2x + 3 = 7",  # x is a variable, not "times": "2 * + 3" would be 6
        "Solve for x: 3x - 2 = 10",
    ],
)
def test_from_text_never_computes_from_part_of_an_expression(text):
    assert from_text(text) is None


@pytest.mark.parametrize(
    "text",
    [
        "What is 1" + "0" * 400 + " + 1?",  # beyond a float
        "What is 1" + "0" * 300 + " * 1" + "0" * 300 + "?",  # the product overflows to infinity
        "What is 1" + "0" * 400 + ".5 + 1?",  # a float literal that parses to infinity
        "What is " + "+".join(["1"] * 3000) + "?",  # too deep for Python's parser
    ],
    ids=["huge-int", "overflowing-product", "huge-float", "deep-sum"],
)
def test_from_text_declines_arithmetic_a_float_cannot_hold(text):
    assert from_text(text) is None
    assert question_features(text)["max_digits"] >= 1  # the orchestrator still reads it


# --- what a reader sees -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("question", "traps"),
    [
        ("Bo has 5 fewer pens than Cy.", ["fewer_than"]),
        ("Dee has 4 fewer than twice as many stamps as Eve.", ["twice_minus"]),
        ("How many more apples does Al have than Bea?", ["how_many_more"]),
        ("It takes 20% off, and then a further 10% off the reduced price.", ["percent_of_percent"]),
        ("She gives 1/3 to Al and half of the remaining cookies to Bo.", ["of_remaining"]),
        ("Ann has 3 apples and 4 pears.", []),
    ],
)
def test_traps_in_reads_the_phrasing(question, traps):
    assert traps_in(question) == traps


def test_question_features_read_only_the_text():
    easy = question_features("Ann has 3 apples and buys 4 more. How many apples does she have?")
    hard = question_features(
        "A shop orders 3 gross of pencils and sells 125 fewer than twice as many pens as pencils each fortnight. "
        "How many more pens than pencils are sold in a leap year?"
    )
    assert easy["traps"] == 0 and easy["knowledge"] == 0 and easy["est_steps"] <= 2
    assert hard["trap_twice_minus"] == 1 and hard["trap_how_many_more"] == 1
    assert hard["knowledge"] == 1 and hard["fact_obscurity"] == FACTS["gross"].obscurity
    assert hard["est_steps"] > easy["est_steps"] and hard["words"] > easy["words"]
    assert all(isinstance(v, float) for v in hard.values())


def _plan(text: str) -> Plan:
    return Plan.parse(text)


COT_S = _plan('<agent id="a1" type="CoT" model="small"/>')
COT_L = _plan('<agent id="a1" type="CoT" model="large"/>')
REFL_S = _plan('<agent id="a1" type="Reflexion" model="small" iterations="2"/>')
SC_S = _plan('<agent id="a1" type="SelfConsistency" model="small" k="7"/>')
WS_COT_S = _plan(
    '<agent id="a1" type="WebSearch" queries="1" top_k="4"/><agent id="a2" type="CoT" model="small"/>'
    '<edge from="a1" to="a2"/>'
)
EASY = "Ann has 3 apples and buys 4 more. How many apples does she have?"
OBSCURE = "A school orders 3 gross of pencils. How many pencils does it order?"
TRAP = "Dee has 4 fewer than twice as many stamps as Eve. Eve has 10 stamps. How many stamps does Dee have?"
LONG = "Al buys 12 boxes of 24 cans at $1.75 a can, 15 crates of 36 jars at $2.25 a jar and pays with 3 bills of $500. What change does he get?"


@pytest.mark.parametrize(
    ("question", "better", "worse"),
    [
        (OBSCURE, WS_COT_S, COT_S),  # search helps when an obscure fact is cued
        (EASY, COT_S, WS_COT_S),  # ... and distracts otherwise
        (TRAP, COT_L, SC_S),  # a trap wants a stronger tier, not more votes
        (EASY, COT_S, REFL_S),  # a small Reflexion second-guesses easy questions
        (LONG, SC_S, COT_S),  # votes help long arithmetic
    ],
)
def test_heuristic_ranks_obvious_pairs(question, better, worse):
    f = question_features(question)
    assert heuristic_plan_score(f, better) > heuristic_plan_score(f, worse)
