"""Reading answers out of a real model's text: per domain, what counts as an answer and what is a
parse failure; the vote; the math calculator tool; the query parser."""

from __future__ import annotations

import pytest

from orchrm.data.quality import numeric_match
from orchrm.execution.llm.answers import check_arithmetic, compiles, extract_answer, majority
from orchrm.execution.llm.backend import parse_queries

PROMPT = 'from typing import List\n\n\ndef add(xs: List[int]) -> int:\n    """Sum of xs.\n    >>> add([1, 2])\n    3\n    """\n'

MATH = [
    # text, finished, answer
    ("48 / 2 = 24 clips in May.\n48 + 24 = 72\nAnswer: 72", True, "72"),
    ("So the total is 72.\nAnswer: $1,234.50", True, "1234.5"),
    ("Answer: 48 + 24 = 72", True, "72"),
    ("The answer is 72 clips, since 48 + 24.", True, "72"),
    ("#### 72", True, "72"),
    ("so the answer is \\boxed{72}.", True, "72"),
    ("She sold 48, then 24, so 72 in all.", True, "72"),  # finished without a marker: the last number
    ("She sold 48, then 24, so", False, None),  # cut at max_tokens, no marker: mid-computation
    ("Answer: 72", False, "72"),  # cut after the marker: still an answer
    ("I cannot tell.", True, None),
    ("Answer: unknown", True, None),
]


@pytest.mark.parametrize(("text", "finished", "answer"), MATH, ids=[m[0][:24] for m in MATH])
def test_math_answer_is_the_final_number_or_a_parse_failure(text, finished, answer):
    found = extract_answer("math", text, finished=finished)
    assert found.answer == answer
    assert found.parse_failed is (answer is None)


def test_math_answer_is_what_the_domain_quality_rule_reads():
    found = extract_answer("math", "48 + 24 = 72 and 72 - 2 = 70 is wrong.\nAnswer: 72 clips")
    assert numeric_match(found.answer, "Natalia sold 48+24=72 clips.\n#### 72") == 1.0


def test_code_block_gets_the_prompts_imports_and_compiles():
    text = "Here it is:\n```python\ndef add(xs: List[int]) -> int:\n    return sum(xs)\n```\nDone."
    found = extract_answer("code", text, prompt=PROMPT, entry_point="add")
    assert found.how == "code block"
    assert found.answer.startswith("from typing import List\ndef add(")
    assert compiles(found.answer)


def test_code_body_without_the_signature_is_appended_to_the_prompt():
    found = extract_answer("code", "```python\n    return sum(xs)\n```", prompt=PROMPT, entry_point="add")
    assert found.answer.startswith(PROMPT) and found.answer.rstrip().endswith("return sum(xs)")


def test_code_without_a_fence_is_read_from_its_def_and_an_unclosed_fence_to_the_end():
    bare = extract_answer("code", "Sure.\ndef add(xs):\n    return sum(xs)\n", prompt=PROMPT, entry_point="add")
    cut = extract_answer("code", "```python\ndef add(xs):\n    return sum(", prompt=PROMPT, entry_point="add")
    assert bare.how == "def" and "return sum(xs)" in bare.answer
    assert cut.how == "code block" and not compiles(cut.answer)  # an answer, a wrong one: the tests score it 0


def test_code_with_no_code_at_all_is_a_parse_failure():
    assert extract_answer("code", "You should add the numbers up.", prompt=PROMPT, entry_point="add").parse_failed


@pytest.mark.parametrize(
    ("domain", "text", "finished", "yes_no", "answer"),
    [
        ("webqa", "The page says so.\nAnswer: Denver Broncos.", True, False, "Denver Broncos"),
        ("webqa", "Answer: **Paris**", True, False, "Paris"),
        ("webqa", "It was founded by\nPort Ellison", True, False, "Port Ellison"),  # finished: the last line
        ("webqa", "It was founded by", False, False, None),  # cut, no marker
        ("multihop", "Answer: Yes, because sharks live in water.", True, True, "yes"),
        ("multihop", "Answer: no.", True, True, "no"),
        ("multihop", "Answer: maybe", True, True, None),  # a yes/no question needs yes or no
        ("multihop", "Step 1 ... Answer: Orison Pictures", True, False, "Orison Pictures"),
    ],
)
def test_short_answers(domain, text, finished, yes_no, answer):
    assert extract_answer(domain, text, finished=finished, yes_no=yes_no).answer == answer


def test_a_long_sentence_after_the_marker_is_cut_to_a_short_answer():
    found = extract_answer("webqa", "Answer: " + " ".join(f"w{i}" for i in range(40)))
    assert len(found.answer.split()) == 12


def test_majority_ignores_parse_failures_and_breaks_ties_by_first_seen():
    assert majority(["72", None, "70", "72"]) == ("72", 2)
    assert majority(["70", "72"]) == ("70", 1)
    assert majority([None, None]) == (None, 0)


def test_calculator_names_each_wrong_step_only():
    assert check_arithmetic("48 / 2 = 24 and 48 + 24 = 72") == []
    assert check_arithmetic("3 x 4 = 13, 1,200 - 200 = 1,000") == ["3 x 4 = 13 is wrong: 3 x 4 = 12"]


def test_queries_are_one_per_line_without_numbering_and_at_most_n():
    assert parse_queries("Query 1: capital of France\nQuery 2: 'Paris'\n3. Eiffel tower", 2) == ["capital of France", "Paris"]
    assert parse_queries("\n\n", 2) == []
