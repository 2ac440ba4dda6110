#!/usr/bin/env bash
# What a reviewer sees in the MLflow UI, as PNGs: the newest pipeline run (its description: the
# verdict with every gate's figure; its parameters: the resolved config), the model version it
# registered, and the comparison of the two newest versions. Headless Chromium (Debian's
# `chromium` package) on `mlflow ui` started on a store, on a free loopback port.
#
#   scripts/mlflow_screenshots.sh                       # two pipeline runs on configs/tiny.yaml in a temporary store
#   scripts/mlflow_screenshots.sh --store sqlite:///$PWD/.orchrm/mlflow.db --out /tmp/shots   # the demo's store
#
# Writes run.png, version.png and compare.png under --out (default docs/mlflow/).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,10s/^# \{0,1\}//p' "$0"; }
store="" out="docs/mlflow" model="orchrm-reward" width=1600 height=2000
while [ $# -gt 0 ]; do
  case "$1" in
    --store) store="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done

PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || { echo "no $PY: run \`make install\` first (or set PY=/path/to/python with orchrm installed)" >&2; exit 1; }
CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
[ -n "$CHROMIUM" ] || { echo "no Chromium: install Debian's package (apt-get install chromium) or set CHROMIUM=/path/to/chrome" >&2; exit 1; }
set -a; . orchrm/util/offline.env; set +a

work=$(mktemp -d)
ui_pid=""
cleanup() { [ -n "$ui_pid" ] && kill "$ui_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

if [ -z "$store" ]; then
  # two nights on the tiny config: the first promoted, the second evaluated against it
  "$PY" - "$work" <<'EOF'
import sys, yaml
work = sys.argv[1]
config = yaml.safe_load(open("configs/tiny.yaml")) | {"data_dir": f"{work}/data"}
config["evaluate"]["gates"] |= {"min_pairwise_accuracy": 0.0, "min_best_of_n_gain": -1.0, "beat_cost_only": False}
yaml.safe_dump(config, open(f"{work}/config.yaml", "w"))
EOF
  for night in 1 2; do
    echo "pipeline run $night of 2 on configs/tiny.yaml (store under a temporary folder)"
    "$PY" -m orchrm.cli pipeline --config "$work/config.yaml" --quiet > "$work/night-$night.log" 2>&1 \
      || { tail -30 "$work/night-$night.log" >&2; exit 1; }
  done
  store="sqlite:///$work/data/mlflow.db"
fi

port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ui="http://127.0.0.1:$port"
MLFLOW_TRACKING_URI= "$PY" -m mlflow ui --backend-store-uri "$store" --host 127.0.0.1 --port "$port" --workers 1 > "$work/ui.log" 2>&1 &
ui_pid=$!
for _ in $(seq 240); do
  curl -fsS "$ui/health" > /dev/null 2>&1 && break
  kill -0 "$ui_pid" 2>/dev/null || { cat "$work/ui.log" >&2; exit 1; }
  sleep 0.5
done

# the pages to shoot, from the store's REST API (what the UI itself reads)
"$PY" - "$ui" "$model" > "$work/pages" <<'EOF'
import json, sys, urllib.parse
import httpx
ui, model = sys.argv[1], sys.argv[2]
api = lambda path, **q: httpx.get(f"{ui}/api/2.0/mlflow/{path}", params=q, timeout=60).json()
exp = api("experiments/get-by-name", experiment_name="orchrm")["experiment"]["experiment_id"]
runs = httpx.post(f"{ui}/api/2.0/mlflow/runs/search", timeout=60, json={
    "experiment_ids": [exp], "filter": "tags.`orchrm.stage` = 'pipeline'", "order_by": ["attributes.start_time DESC"], "max_results": 1}).json()
if not runs.get("runs"):
    sys.exit("the store has no pipeline run: run `orchrm pipeline` (or `make demo`) on it first")
run = runs["runs"][0]["info"]["run_id"]
versions = sorted(api("model-versions/search", filter=f"name='{model}'", max_results=100).get("model_versions", []), key=lambda v: int(v["version"]))
if not versions:
    sys.exit(f"the store has no registered model {model!r}")
newest = versions[-1]
pair = {v["version"]: v["run_id"] for v in versions[-2:]}
q = urllib.parse.quote
print(f"run {ui}/#/experiments/{exp}/runs/{run}")
print(f"version {ui}/#/models/{q(model)}/versions/{newest['version']}")
print(f"compare {ui}/#/compare-model-versions?name={q(json.dumps(model))}&runs={q(json.dumps(pair))}")
EOF

# headless Chromium over its DevTools protocol: the training-runs view, the assistant panel closed,
# the description unfolded (scripts/ui_screenshots.py)
"$PY" scripts/ui_screenshots.py --chromium "$CHROMIUM" --pages "$work/pages" --out "$out" --width "$width" --height "$height"
