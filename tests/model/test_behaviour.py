"""Behavioural tables for a trained reward model (Made-With-ML style; STYLE §12).

The model is trained on the synthetic pairs of ``conftest.py`` and probed on questions it never saw:
- MFT: obvious pairs rank right,
- INV: whitespace changes do not flip a ranking,
- DIR: injecting a known error into an agent's output lowers the reward.
"""

from __future__ import annotations

import pytest
import torch

LOOKUP = "Who founded the city of Zennor and in which year was its bridge built?"
ARITH = "Mia has 37 shells and buys 14 more, then gives away 6 of them. How many shells does Mia have now?"
COT_SMALL = '<agent id="a1" type="CoT" model="small"/>'
SEARCH_LARGE = '<agent id="a1" type="WebSearch" queries="2" top_k="5"/>\n<agent id="a2" type="CoT" model="large"/>\n<edge from="a1" to="a2"/>'
VOTE_LARGE = '<agent id="a1" type="SelfConsistency" model="large" k="5"/>'
SEARCH_SMALL = '<agent id="a1" type="WebSearch" queries="1" top_k="3"/>\n<agent id="a2" type="CoT" model="small"/>\n<edge from="a1" to="a2"/>'

MFT = [
    # (question, better plan, worse plan): the best plan depends on the question
    (LOOKUP, SEARCH_LARGE, COT_SMALL),
    (LOOKUP, SEARCH_SMALL, VOTE_LARGE),
    (ARITH, VOTE_LARGE, COT_SMALL),
    (ARITH, VOTE_LARGE, SEARCH_SMALL),
]


@pytest.mark.parametrize(("question", "better", "worse"), MFT)
def test_mft_obvious_pairs_rank_right(trained_model, question, better, worse):
    r = trained_model.score(question, [better, worse])
    assert r[0] > r[1]


def _respace(text: str) -> str:
    return "  " + text.replace(" ", "   ").replace("\n", " \n\n ") + "\n"


@pytest.mark.parametrize(("question", "better", "worse"), MFT)
def test_inv_whitespace_changes_do_not_flip_a_ranking(trained_model, question, better, worse):
    plain = trained_model.score(question, [better, worse])
    spaced = trained_model.score(_respace(question), [_respace(better), _respace(worse)])
    assert (plain[0] > plain[1]) == (spaced[0] > spaced[1])
    torch.testing.assert_close(plain, spaced, rtol=1e-6, atol=1e-6)  # the tokens are the same


NODE = '<agent id="a1" type="CoT" model="small"/>'
DIR = [
    (ARITH, "I add the numbers step by step. The total is 45. Answer: 45"),
    (ARITH, "I add the numbers step by step. The total is 51. Answer: 51"),
    (LOOKUP, "I add the numbers step by step. The total is 12. Answer: 12"),
]


@pytest.mark.parametrize(("question", "output"), DIR)
def test_dir_an_injected_error_lowers_the_reward(trained_model, question, output):
    broken = output.replace("The total is", "Error: the calculator tool failed. The total is")
    r = trained_model.score(question + "\n" + NODE, [f"{NODE}\n{output}", f"{NODE}\n{broken}"])
    assert r[1] < r[0]
