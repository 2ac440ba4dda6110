"""Answer scoring: the last number of each text (numeric match) and SQuAD token F1."""

from __future__ import annotations

import pytest

from orchrm.quality import numeric_match, parse_number


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
    ],
)
def test_numeric_match(prediction, reference, expected):
    assert numeric_match(prediction, reference) == expected


def test_parse_number_takes_the_last_number():
    assert parse_number("from 2 to -.5") == -0.5
    assert parse_number("no digits here") is None
