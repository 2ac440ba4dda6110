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
export $(grep -v '^#' "$root/orchrm/util/offline.env" | xargs)
echo "# in $work"

echo "## your system writes a trace file (under a dot-name, then renamed)"
"$bin/python" -m orchrm.execution.support_desk --tickets 150 --seed 5 --out incoming/desk-night-1.jsonl

echo "## night 1"
"$bin/orchrm" pipeline --config "$root/configs/own_traces.yaml" --traces incoming --quiet

echo "## the champion ranks the plans of a ticket it never saw"
"$bin/python" - <<'PY'
from orchrm import load_reward_model
from orchrm.execution.support_desk import PLANS, expected_quality, make_tickets
from orchrm.model.texts import plan_prompt

model = load_reward_model("models:/orchrm-reward@champion", tracking_uri="sqlite:///.orchrm/mlflow.db")
ticket = make_tickets(1, seed=999)[0]
names = list(PLANS)
rewards = model.score([plan_prompt(ticket.question)] * len(names), [PLANS[n] for n in names])
print(ticket.question.splitlines()[0])
for name, reward in sorted(zip(names, rewards), key=lambda x: -x[1]):
    print(f"  {reward:+.3f}  {name:<15} (expected quality {expected_quality(ticket, name):.2f})")
PY

echo "## night 2: no new file"
"$bin/orchrm" pipeline --config "$root/configs/own_traces.yaml" --traces incoming --quiet
