"""The Bradley-Terry loss against hand-computed values (STYLE §6)."""

from __future__ import annotations

import math

import pytest
import torch

from orchrm.model.reward_model import bt_loss


@pytest.mark.parametrize(
    ("chosen", "rejected", "margin", "expected"),
    [
        ([2.0], [0.0], None, math.log1p(math.exp(-2.0))),
        ([0.0], [0.0], None, math.log(2.0)),
        ([0.0], [2.0], None, math.log1p(math.exp(2.0))),
        ([2.0], [0.0], [0.5], math.log1p(math.exp(-1.5))),
        # the mean over pairs
        ([1.0, 3.0], [0.0, 0.0], None, (math.log1p(math.exp(-1.0)) + math.log1p(math.exp(-3.0))) / 2),
    ],
)
def test_bt_loss_matches_hand_computed_value(chosen, rejected, margin, expected):
    m = None if margin is None else torch.tensor(margin)
    loss = bt_loss(torch.tensor(chosen), torch.tensor(rejected), m)
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_center_rewards_adds_trl_penalty():
    r_c, r_r = torch.tensor([2.0, 1.0]), torch.tensor([0.0, -3.0])
    plain = math.log1p(math.exp(-2.0)) / 2 + math.log1p(math.exp(-4.0)) / 2
    penalty = 0.01 * ((2.0 + 0.0) ** 2 + (1.0 - 3.0) ** 2) / 2
    loss = bt_loss(r_c, r_r, center_rewards_coefficient=0.01)
    assert loss.item() == pytest.approx(plain + penalty, rel=1e-6)


def test_bt_loss_is_stable_for_large_reward_gaps():
    loss = bt_loss(torch.tensor([-200.0]), torch.tensor([200.0]))
    assert math.isfinite(loss.item()) and loss.item() == pytest.approx(400.0)
    assert bt_loss(torch.tensor([200.0]), torch.tensor([-200.0])).item() == pytest.approx(0.0, abs=1e-30)


def test_gradient_pushes_chosen_up_and_rejected_down():
    r_c = torch.tensor([0.3], requires_grad=True)
    r_r = torch.tensor([0.1], requires_grad=True)
    bt_loss(r_c, r_r).backward()
    expected = -1.0 / (1.0 + math.exp(0.2))  # d/dr_w of -log sigmoid(r_w - r_l) = -(1 - sigmoid(diff))
    assert r_c.grad.item() == pytest.approx(expected, rel=1e-6)
    assert r_r.grad.item() == pytest.approx(-expected, rel=1e-6)
