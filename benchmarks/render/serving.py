"""The pages of the serving benchmarks: scoring latency (``latency.json``), loading the champion
from the registry (``registry.json``) and the reward-model server under load (``serving_load.json``)."""

from __future__ import annotations

from benchmarks.render.records import Benchmark, Record, met, num, table, yes


def _default_at_target(res: Record) -> Record:
    t = res["target"]
    default = res.rows("rows")[0]["model"]
    return next(r for r in res.rows("rows") if r["model"] == default and r["candidates"] == t["candidates"])


def latency_page(res: Record) -> list[str]:
    rows, t, m = res.rows("rows"), res["target"], res["machine"]
    calls = {r["candidates"]: r["calls"] for r in rows}
    return [
        "# Scoring latency: `model.score(question, plans)` for N candidates of one question (CPU, fp32)", "",
        f"PyTorch, {m['torch_threads']} thread(s), end to end (tokenizing included); {calls[min(calls)]} calls per cell "
        f"({calls[max(calls)]} for N={max(calls)}; p95 of so few is near their slowest) over {res['questions']} built-in "
        "questions, each with plans sampled by the base orchestrator. Limit = the forward pass's FLOPs (real tokens) / the "
        "rate of a 1024x1024 fp32 matmul timed just before the cell's calls: a figure for scale, not a target. The "
        f"machine was shared with other jobs (load average at the end {m['load_average'][0]:.1f}).", "",
        *table(["model", "N", "tokens", "p50 ms", "p95 ms", "limit ms", "matmul GFLOP/s"],
               [[r["model"], str(r["candidates"]), f"{r['tokens']:.0f}", f"{r['p50_ms']:.1f}", f"{r['p95_ms']:.1f}",
                 f"{r['limit_ms']:.2f}", f"{r['matmul_gflops']:.0f}"] for r in rows]), "",
        f"Target: p50 <= {t['default_p50_ms']:.0f} ms for {t['candidates']} candidates with the default model: "
        f"{_default_at_target(res)['p50_ms']:.1f} ms, {met(t['met'])}."]


def latency_section(res: Record) -> list[str]:
    rows = [[r["model"], str(r["candidates"]), num(r["tokens"], ".0f"), num(r["p50_ms"], ".1f"), num(r["p95_ms"], ".1f"),
             num(r["limit_ms"], ".2f")] for r in res.rows("rows")]
    t = res["target"]
    return [*table(["model", "N", "tokens", "p50 ms", "p95 ms", "compute limit ms"], rows), "",
            f"Target: p50 <= {num(t['default_p50_ms'], 'g')} ms for {t['candidates']} candidates with the default model: "
            f"{met(t['met'])}.", ""]


def _runs(colds: list[Record], key: str, digits: int = 2) -> str:
    return ", ".join(f"{c[key]:.{digits}f}" for c in colds)


def registry_page(res: Record) -> list[str]:
    cold, tp, t, m = res["cold_start"], res["throughput"], res["target"], res["machine"]
    med, colds, n = cold["median"], cold.rows("processes"), cold["candidates"]
    score_s, pyfunc_s = tp["model_score_s"], tp["pyfunc_s"]
    return [
        "# Serving from the registry: cold load of the champion, pyfunc throughput", "",
        f"Model: {res['model']}, untrained weights (speed does not depend on them); PyTorch on {m['torch_threads']} "
        f"thread(s). The machine was shared with other jobs (load average at the end {m['load_average'][0]:.1f}).", "",
        f"## Cold start: new process, `load_reward_model(\"models:/orchrm-reward@champion\")` (SQLite registry), score "
        f"{n} candidates", "",
        *table(["", "median s", "runs"], [
            ["process start to exit", f"{med['wall_s']:.2f}", _runs(colds, "wall_s")],
            ["import torch, transformers' BERT, orchrm", f"{med['import_s']:.2f}", _runs(colds, "import_s")],
            ["import mlflow", f"{med['mlflow_import_s']:.2f}", _runs(colds, "mlflow_import_s")],
            ["open the store, resolve the alias, download, load the model", f"{med['load_s']:.2f}", _runs(colds, "load_s")],
            [f"first score of {n} plans", f"{med['score_s']:.3f}", _runs(colds, "score_s", 3)],
        ], align="lrl"), "",
        *_cold_rank(res), "",
        f"## Throughput on {tp['rows']:,} (prompt, action) rows ({tp['distinct_prompts']} distinct questions, their sampled plans)",
        "",
        *table(["scorer", "best s", "rows/s", "calls (s)"], [
            ["`model.score(prompts, actions)`", f"{min(score_s):.2f}", f"{tp['model_score_rows_per_s']:,.0f}",
             ", ".join(f"{s:.2f}" for s in score_s)],
            ["`pyfunc.predict(DataFrame)` (`mlflow.pyfunc.load_model`)", f"{min(pyfunc_s):.2f}", f"{tp['pyfunc_rows_per_s']:,.0f}",
             ", ".join(f"{s:.2f}" for s in pyfunc_s)],
        ], align="lrrl"), "",
        f"Pyfunc / model.score = {tp['pyfunc_over_score']:.3f}x (target <= {t['pyfunc_over_score']}x: {met(t['met'])}); "
        f"rewards identical: {yes(tp['identical_rewards'])}."]


def _cold_rank(res: Record) -> list[str]:
    """The cold ``orchrm rank`` table, or a line saying the file predates measuring it."""
    rank = res.get("cold_rank")
    if rank is None:
        return ["## Cold `orchrm rank` from the registry", "", "Not measured in this file (it predates the measurement): "
                "rerun `python -m benchmarks.registry`."]
    imports = {k: rank["imports_s"][k] for k in rank["imports_s"] if k != "total"}
    runs = ", ".join(f"{r['wall_s']:.2f}" for r in rank.rows("processes"))
    ranked = sorted(imports.items(), key=lambda kv: -kv[1])
    top = ranked[:10] + [kv for kv in ranked[10:] if kv[0] == "orchrm"]  # our own share, always shown
    rest = sum(imports.values()) - sum(v for _, v in top)
    return [
        f"## Cold `orchrm rank` from the registry: a new process samples {rank['candidates']} plans, loads the champion, "
        "scores and prints them", "",
        *table(["", "s"], [
            ["process start to exit (median)", f"{rank['median_s']:.2f}"],
            ["of which imports (`python -X importtime`, one more process; per package)", f"{rank['imports_s']['total']:.2f}"],
            *[[f"  `{name}`", f"{s:.2f}"] for name, s in top],
            ["  everything else", f"{rest:.2f}"],
        ], align="lr"), "",
        f"Runs: {runs} s. Target: under "
        f"{rank['target_s']:g} s on a quiet machine: {met(rank['met'])} (load average at the end "
        f"{res['machine']['load_average'][0]:.1f}). `-X importtime` adds its own overhead, so the split is an upper bound. The packages are those of "
        "the environment the benchmark ran in (`make`'s, with the [pipeline] extra); a lean install carries fewer."]


def registry_section(res: Record) -> list[str]:
    m, tp, t = res["cold_start"]["median"], res["throughput"], res["target"]
    return [*table(["measurement", "median s"], [
        ["process start to exit", num(m["wall_s"], ".2f")], ["imports (torch, transformers, orchrm)", num(m["import_s"], ".2f")],
        ["import mlflow", num(m["mlflow_import_s"], ".2f")], ["resolve the alias, download, load", num(m["load_s"], ".2f")],
        ["first score", num(m["score_s"], ".3f")],
        *([["cold `orchrm rank` (imports)", f"{num(res['cold_rank']['median_s'], '.2f')} "
            f"({num(res['cold_rank']['imports_s']['total'], '.2f')})"]] if res.get("cold_rank") else [])]), "",
        *table(["scorer", "rows/s"], [["`model.score`", num(tp["model_score_rows_per_s"], ".0f")],
                                      ["`pyfunc.predict`", num(tp["pyfunc_rows_per_s"], ".0f")]]), "",
        f"Pyfunc / model.score time: {num(tp['pyfunc_over_score'], '.3f')}x (target <= {num(t['pyfunc_over_score'], 'g')}x: "
        f"{met(t['met'])}); identical rewards: {yes(tp.get('identical_rewards'))}.", ""]


def _load_rows(res: Record) -> list[list[str]]:
    return [[str(r["clients"]), str(r["requests"]), f"{r['wall_s']:.1f}", num(r["requests_per_s"], ".1f"),
             num(r["candidates_per_s"], ".0f"), num(r["p50_ms"], ".1f"), num(r["p99_ms"], ".1f"), str(r["failed"])]
            for r in res.rows("rows")]


_LOAD_HEADER = ["clients", "requests", "s", "requests/s", "candidates/s", "p50 ms", "p99 ms", "failed"]


def serving_load_page(res: Record) -> list[str]:
    server, bounds, m = res["server"], res["bounds"], res["machine"]
    return [
        "# The reward-model server under load: `mlflow models serve` of the champion, concurrent clients", "",
        f"Model: {res['model']}, untrained weights (speed does not depend on them). Server: `{server['command']}` on "
        f"loopback ({server['workers']} uvicorn worker(s), {server['torch_threads_per_worker']} torch thread(s) each). "
        f"Each request scores the {res['candidates_per_request']} candidate plans of one of {res['questions']} built-in "
        f"questions; each client is a thread with one HTTP connection; a level ends after {bounds['requests']} requests "
        f"or {bounds['seconds']:g} s. Latency is the client's: request sent to answer parsed. Clients and server shared "
        f"the machine's {m['cpus']} CPU(s) with other jobs (load average at the end {m['load_average'][0]:.1f}).", "",
        *table(_LOAD_HEADER, _load_rows(res)), "",
        f"Failed requests: {res['failed']} (must be 0). Served rewards equal `model.score` of the same rows: "
        f"{yes(res['served_rewards_match_model_score'])}."]


def serving_load_section(res: Record) -> list[str]:
    return [*table(_LOAD_HEADER, _load_rows(res)), "",
            f"`{res['server']['command']}`; {res['candidates_per_request']} candidates per request; failed requests: "
            f"{res['failed']}.", ""]


BENCHMARKS = {
    "latency": Benchmark("Scoring latency", "`model.score(question, plans)` for N candidates of one question, end to end.",
                         latency_page, latency_section),
    "registry": Benchmark("Serving from the registry", "Loading the champion in a cold process, and the pyfunc's throughput "
                          "against `model.score`.", registry_page, registry_section),
    "serving_load": Benchmark("The reward-model server under load", "`mlflow models serve` of the champion at 1, 4 and 16 "
                              "concurrent clients, 8 candidates per request.", serving_load_page, serving_load_section),
}
