#!/usr/bin/env bash
# The first nights on your own system, end to end, in a scratch folder: a support desk's traces
# (python -m orchrm.execution.support_desk: the working plan depends on the ticket) through
# configs/own_traces.yaml as the nightly runs it, the champion ranking a new ticket's plans, and a
# second night with no new file. What the README's "Your own system, every night" quotes.
#
#   bash scripts/first_night.sh [FOLDER]     # default: a new temporary folder; about 3 minutes on 2 cores
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${VENV:-$root/.venv}/bin
work=${1:-$(mktemp -d)}
mkdir -p "$work" && cd "$work"
# shellcheck disable=SC2046
export $(grep -v '^#' "$root/orchrm/util/offline.env" | xargs) MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR=false
echo "# in $work"

echo "## your system writes a trace file (under a dot-name, then renamed)"
"$bin/python" -m orchrm.execution.support_desk --tickets 150 --seed 5 --out incoming/desk-night-1.jsonl

echo "## night 1"
"$bin/orchrm" pipeline --config "$root/configs/own_traces.yaml" --traces incoming --quiet

echo "## the champion picks among the 6 plans of 200 tickets it never saw"
"$bin/python" - <<'PY'
from orchrm import load_reward_model
from orchrm.execution.support_desk import PLANS, WORKING_PLAN, expected_quality, make_tickets, true_pair_accuracy
from orchrm.model.texts import plan_prompt

model = load_reward_model("models:/orchrm-reward@champion", tracking_uri="sqlite:///.orchrm/mlflow.db")
names = list(PLANS)


def score(question, plans):
    return model.score([plan_prompt(question)] * len(plans), plans)


tickets = make_tickets(200, seed=999)
picks = [names[max(range(len(names)), key=lambda i, r=score(t.question, [PLANS[n] for n in names]): r[i])] for t in tickets]
working = sum(p == WORKING_PLAN[(t.category, t.urgency)] for p, t in zip(picks, tickets))
quality = sum(expected_quality(t, p) for p, t in zip(picks, tickets)) / len(tickets)
best = sum(max(expected_quality(t, n) for n in names) for t in tickets) / len(tickets)
rand = sum(sum(expected_quality(t, n) for n in names) / len(names) for t in tickets) / len(tickets)
print(f"top pick is the working plan on {working} of {len(tickets)} tickets (a random pick: 1 in {len(names)})")
print(f"expected quality of the pick {quality:.3f}; random plan {rand:.3f}; the best plan {best:.3f}")
print(f"plan pairs ordered right (expected quality differs): {true_pair_accuracy(score, tickets):.3f} (chance 0.5)")
PY

echo "## night 2: no new file"
"$bin/orchrm" pipeline --config "$root/configs/own_traces.yaml" --traces incoming --quiet
