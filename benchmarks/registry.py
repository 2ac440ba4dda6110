"""Serving from the registry: what loading the champion costs, and what the pyfunc adds to scoring.

Three measurements (issues 15 and 21), written to ``benchmarks/results/registry.json``:

1. **Cold start**: a fresh Python process imports OrchRM, loads ``models:/orchrm-reward@champion``
   from a SQLite registry and scores the first 8 candidate plans of one question. Timed from
   outside (process start to exit) and inside (import, load, first score). Median of ``--cold``
   processes.
2. **Cold ``orchrm rank``**: a fresh ``orchrm rank --model models:/orchrm-reward@champion`` process
   (sample 8 candidate plans for a question, load the champion, score and print them), timed
   from outside; one more process under ``python -X importtime`` splits out the time spent
   importing, per top-level package. Target (:data:`benchmarks.common.targets.REGISTRY`): under
   5 s on a quiet machine.
3. **Pyfunc throughput**: the registered MLflow pyfunc's ``predict`` on a DataFrame of 10,000
   (prompt, action) rows, beside ``model.score`` on the same rows in the same process (calls
   alternating, best of ``--reps``). Target (:data:`benchmarks.common.targets.REGISTRY`): the pyfunc
   within 1.2x of ``model.score``.

The model is the default architecture (``configs/default.yaml``'s model section) with its tokenizer
fitted on the benchmark's texts and untrained weights: speed does not depend on the weights. The
candidates are plans the base orchestrator samples for the built-in tasks.

Run niced on a shared machine::

    nice python -m benchmarks.registry         # writes results/registry.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common.candidates import questions_with_plans
from benchmarks.common.results_io import RESULTS, ROOT, command_line, provenance, write_json
from benchmarks.common.targets import REGISTRY

ROWS = 10_000
COLD_CANDIDATES = 8

# run in a fresh interpreter: the cold start of a process that serves the champion
COLD = """
import json, sys, time
t0 = time.perf_counter()
import torch
torch.set_num_threads({threads})
from orchrm import load_reward_model
import transformers.models.bert.modeling_bert  # the scratch encoder's modules, imported when it is built
t1 = time.perf_counter()
import mlflow.artifacts, mlflow.tracking  # what loading from the registry imports first
t15 = time.perf_counter()
model = load_reward_model("models:/orchrm-reward@champion", tracking_uri={uri!r})
t2 = time.perf_counter()
case = json.loads(sys.stdin.read())
rewards = model.score(case["question"], case["plans"])
t3 = time.perf_counter()
print(json.dumps({{"import_s": t1 - t0, "mlflow_import_s": t15 - t1, "load_s": t2 - t15, "score_s": t3 - t2,
                  "n": len(rewards)}}))
"""


def registry_with_champion(root: Path, model) -> tuple[str, str]:
    """A SQLite registry under ``root`` whose champion is ``model``; returns (tracking URI, model URI)."""
    from orchrm.config import PipelineConfig
    from orchrm.evaluation.gates import GateResult, Verdict
    from orchrm.ops import registry, tracking

    config = PipelineConfig(data_dir=str(root / "data"))
    tracking.configure(config)
    run_id = tracking.start_run(config, "bench-registry")
    file = model.save(root / "model" / "model.safetensors")
    uri = registry.log_model(file, run_id=run_id, config=config)
    verdict = Verdict((GateResult("benchmark", True, None, None, "a benchmark's model, not evaluated"),))
    version = registry.register_candidate(uri, run_id=run_id, verdict=verdict, data_digest="benchmark", config=config)
    # a benchmark's model carries no evaluation, which promote requires: the alias is set directly
    tracking.client(tracking.tracking_uri(config)).set_registered_model_alias(config.registry.model_name, "champion", str(version))
    tracking.end_run(config, run_id)
    return tracking.tracking_uri(config), uri


def cold_start(uri: str, case: dict, threads: int) -> dict:
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", COLD.format(uri=uri, threads=threads)], input=json.dumps(case),
                          capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"cold-start process failed:\n{done.stderr[-3000:]}")
    inner = json.loads(done.stdout.strip().splitlines()[-1])
    return {"wall_s": wall, **inner}


RANK_QUESTION = "Ann has 3 boxes of 12 pencils and gives away 7. How many pencils does she have left?"


def _rank_command(*, importtime: bool) -> list[str]:
    flags = ["-X", "importtime"] if importtime else []
    return [sys.executable, *flags, "-m", "orchrm.cli", "rank", "--model", "models:/orchrm-reward@champion",
            "--question", RANK_QUESTION, "--n", str(COLD_CANDIDATES)]


def import_times(stderr: str) -> dict[str, float]:
    r"""Seconds spent importing, per top-level package, from ``python -X importtime``'s report: the
    *self* time of every module summed under its package (``torch._C`` counts for ``torch``, whoever
    imported it), and ``total``, their sum.

    >>> import_times("import time: self [us] | cumulative | imported package\n"
    ...              "import time:    250000 |     300000 |   torch._C\n"
    ...              "import time:    250000 |    2000000 | torch\n")
    {'torch': 0.5, 'total': 0.5}
    """
    out: dict[str, float] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "imported package" in line:
            continue
        self_us, _, name = line.removeprefix("import time:").split("|")
        root = name.strip().split(".")[0]
        out[root] = out.get(root, 0.0) + int(self_us) / 1e6
    return {**dict(sorted(out.items(), key=lambda kv: -kv[1])), "total": sum(out.values())}


def cold_rank(uri: str, threads: int) -> dict:
    """Wall seconds of a fresh ``orchrm rank`` process against the registry at ``uri``."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "OMP_NUM_THREADS": str(threads)}
    start = time.perf_counter()
    done = subprocess.run(_rank_command(importtime=False), capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"orchrm rank failed:\n{done.stderr[-3000:]}")
    return {"wall_s": wall}


def rank_imports(uri: str, threads: int) -> dict[str, float]:
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run(_rank_command(importtime=True), capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"orchrm rank failed:\n{done.stderr[-3000:]}")
    return import_times(done.stderr)


def best_of(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=3, help="built-in tasks per domain for the candidates (default 3)")
    ap.add_argument("--cold", type=int, default=3, help="cold-start processes (default 3)")
    ap.add_argument("--reps", type=int, default=3, help="timed calls of each scorer on the 10,000 rows (default 3)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    import mlflow.pyfunc
    import pandas as pd

    from orchrm import BradleyTerryModel
    from orchrm.config import load_config

    cases = questions_with_plans(args.tasks, 64, seed=7)
    model = BradleyTerryModel(config=load_config(ROOT / "configs" / "default.yaml").model)
    model.fit_tokenizer([c.question for c in cases] + [p for c in cases for p in c.plans])
    model.eval()
    prompts = [c.question for c in cases for _ in c.plans]
    actions = [p for c in cases for p in c.plans]
    reps = -(-ROWS // len(actions))
    frame = pd.DataFrame({"prompt": (prompts * reps)[:ROWS], "action": (actions * reps)[:ROWS]})

    with tempfile.TemporaryDirectory(prefix="bench-registry-") as tmp:
        uri, model_uri = registry_with_champion(Path(tmp), model)
        case = {"question": cases[0].question, "plans": list(cases[0].plans[:COLD_CANDIDATES])}
        colds = []
        for i in range(args.cold):
            colds.append(cold_start(uri, case, args.threads))
            print(f"cold start {i + 1}: {colds[-1]['wall_s']:.2f} s", file=sys.stderr)
        ranks = []
        for i in range(args.cold):
            ranks.append(cold_rank(uri, args.threads))
            print(f"cold orchrm rank {i + 1}: {ranks[-1]['wall_s']:.2f} s", file=sys.stderr)
        imports = rank_imports(uri, args.threads)

        mlflow.set_tracking_uri(uri)
        pyfunc = mlflow.pyfunc.load_model("models:/orchrm-reward@champion")
        p_list, a_list = frame["prompt"].tolist(), frame["action"].tolist()
        same = (pyfunc.predict(frame)["reward"].to_numpy() == model.score(p_list, a_list).numpy()).all()
        score_s, pyfunc_s = [], []
        for _ in range(args.reps):  # alternating, so load changes hit both alike
            score_s.append(best_of(lambda: model.score(p_list, a_list), 1))
            pyfunc_s.append(best_of(lambda: pyfunc.predict(frame), 1))
            print(f"model.score {score_s[-1]:.2f} s, pyfunc {pyfunc_s[-1]:.2f} s", file=sys.stderr)

    med = {k: statistics.median(c[k] for c in colds) for k in ("wall_s", "import_s", "mlflow_import_s", "load_s", "score_s")}
    ratio = min(pyfunc_s) / min(score_s)
    rank_s = statistics.median(r["wall_s"] for r in ranks)
    cfg = model.config
    name = f"default ({cfg.encoder} {cfg.hidden_dim}x{cfg.num_layers}, {cfg.architecture})"
    path = write_json(args.out / "registry.json", {
        "benchmark": "loading the champion from the registry (cold process) and the pyfunc's scoring throughput",
        **provenance(command_line("benchmarks.registry", ap, args), torch=torch.__version__,
                     torch_threads=torch.get_num_threads(), mlflow=mlflow.__version__),
        "model": name,
        "cold_start": {"candidates": COLD_CANDIDATES, "processes": colds, "median": med},
        "cold_rank": {
            "command": "orchrm rank --model models:/orchrm-reward@champion --question ... --n 8",
            "candidates": COLD_CANDIDATES, "processes": ranks, "median_s": rank_s,
            "imports_s": imports, "target_s": REGISTRY.cold_rank_s, "met": rank_s <= REGISTRY.cold_rank_s,
        },
        "throughput": {
            "rows": ROWS, "distinct_prompts": len(cases), "model_score_s": score_s, "pyfunc_s": pyfunc_s,
            "model_score_rows_per_s": ROWS / min(score_s), "pyfunc_rows_per_s": ROWS / min(pyfunc_s),
            "pyfunc_over_score": ratio, "identical_rewards": bool(same),
        },
        "target": {"pyfunc_over_score": REGISTRY.pyfunc_over_score, "met": ratio <= REGISTRY.pyfunc_over_score},
    })
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
