"""Answer scoring: the last number of each text (numeric match) and SQuAD token F1."""

from __future__ import annotations

import pytest

from orchrm.data.quality import LLMJudge, numeric_match, parse_number, pass_rate


@pytest.mark.parametrize(
    ("prediction", "reference", "expected"),
    [
        ("The answer is 1,000.", "1000", 1.0),
        ("$5", "5", 1.0),
        ("3.0", "3", 1.0),
        ("-3", "-3", 1.0),
        ("\u22123", "-3", 1.0),  # the Unicode minus of typeset output is a minus
        ("\u22123", "3", 0.0),
        ("x = \u22122.5", "2.5", 0.0),
        ("between 10-12 apples", "12", 1.0),  # a hyphen after a digit is a range, not a sign
        ("5-3", "-3", 0.0),
        ("7 - 3 = 4. Answer: 4", "4", 1.0),
        ("", "4", 0.0),
        (None, "4", 0.0),
        ("12,5", "125", 0.0),  # not a thousands grouping: no number 125 is written
        ("x = 3,4", "34", 0.0),
        ("1,234,567", "1234567", 1.0),
        ("The answer is 1,000, as computed.", "1000", 1.0),  # a comma after the number ends it
        ("Total: $2,500, paid.", "2500", 1.0),
        ("Therefore,42", "42", 1.0),
        ("1e3", "3", 0.0),  # an exponent belongs to its number
        ("1.5e3", "1500", 1.0),
        ("9" * 400, "8" * 400, 0.0),  # beyond a float: no number, not inf == inf
    ],
)
def test_numeric_match(prediction, reference, expected):
    assert numeric_match(prediction, reference) == expected


def test_parse_number_takes_the_last_number():
    assert parse_number("from 2 to -.5") == -0.5
    assert parse_number("no digits here") is None


@pytest.mark.parametrize(
    ("reply", "grade"),
    [("8/10", 0.8), ("Grade: 3 out of 10", 0.3), ("7\nThe response misses 2 of the 3 points.", 0.7), ("10", 1.0), ("0", 0.0)],
)
def test_the_judges_grade_is_the_one_out_of_ten(reply, grade):
    assert LLMJudge(lambda prompt: reply)({"question": "q", "content": "c"}) == pytest.approx(grade)


def test_the_judge_sees_a_reference_only_when_there_is_one():
    prompts = []
    judge = LLMJudge(lambda prompt: prompts.append(prompt) or "5")
    for reference in (float("nan"), None, "  ", "Paris"):
        judge({"question": "q", "content": "c", "reference": reference})
    assert ["Reference answer" in p for p in prompts] == [False, False, False, True]
    assert "nan" not in prompts[0]
    with pytest.raises(ValueError, match="no grade"):
        LLMJudge(lambda prompt: "excellent")({"question": "q", "content": "c"})


def test_pass_rate_is_a_fraction_of_the_tests():
    assert pass_rate(3, 4) == 0.75 and pass_rate(0, 0) == 0.0
    for passed, total in ((3, 2), (-1, 2)):
        with pytest.raises(ValueError, match="between 0 and the total"):
            pass_rate(passed, total)
