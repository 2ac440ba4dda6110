import pytest

from orchrm.util.tokens import count_joined, count_tokens


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("a", 1),
        ("word", 1),
        ("words", 2),  # letters: one token per started 4
        ("123", 1),
        ("1234567", 3),  # digits: one per started 3
        ("48 / 2 = 24", 5),
        ("Natalia sold 48 clips.", 7),
        ("snake_case", 4),  # '_' is a token of its own
    ],
)
def test_counting_rule(text, tokens):
    assert count_tokens(text) == tokens


def test_joined_count_equals_count_of_the_joined_text():
    pieces = ["You are a solver.", "Question:", "How many clips did Natalia sell in 2 months? " * 5]
    assert count_joined(pieces) == count_tokens("\n".join(pieces))


def test_longer_text_costs_more():
    assert count_tokens("step " * 100) > count_tokens("step " * 10) > 0
