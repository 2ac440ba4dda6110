"""The pages of the data benchmarks: plan choice (``plan_choice.json``), collection speed
(``collect.json``), collection scale-out over Dask workers (``scale_out.json``), pairs and their
data gates (``pairs.json``)."""

from __future__ import annotations

from benchmarks.common.targets import PLAN_CHOICE
from benchmarks.render.records import Benchmark, Record, num, table, yes

PLAN_CHOICE_TARGETS = (f"gap >= {PLAN_CHOICE.gap_points:g} points; top shape share <= {PLAN_CHOICE.top_shape_share:.0%}; "
                       f"priciest best < {PLAN_CHOICE.priciest_best_share:.0%}")


def plan_choice_page(res: Record) -> list[str]:
    d = res["domains"]
    rows = [[k, str(s["tasks"]), f"{s['mean_candidate']:.3f}", f"{s['oracle']:.3f}", f"{s['gap_points']:.1f}",
             f"{s['top_shape_share']:.0%}", f"{s['top_shape_share_strict']:.0%}", f"{s['priciest_best_share']:.0%}",
             f"{s['priciest_among_tied_best_share']:.0%}", f"{s['cot_small']:.2f}", f"{s['cot_large']:.2f}", yes(s["passes"])]
            for k in d for s in [d[k]]]
    return [
        f"# Plan choice in the sandbox ({res['plans']} base-sampler candidates, {res['repeats']} re-runs each, seed {res['seed']})",
        "", *table(["domain:source", "tasks", "mean cand.", "EQ oracle", "gap (pts)", "top shape share", "strict",
                    "priciest best", "strict", "CoT small", "CoT large", "targets met"], rows),
            "",
            f"Targets: {PLAN_CHOICE_TARGETS} (ties to the cheaper plan; the strict columns count every plan tied for "
            "best). Tasks: built-in generators at a seed never used while the noise model was set, and the real data "
            "sets when present."]


def plan_choice_section(res: Record) -> list[str]:
    d = res["domains"]
    rows = [[k, str(d[k]["tasks"]), num(d[k]["mean_candidate"]), num(d[k]["oracle"]), num(d[k]["gap_points"], ".1f"),
             num(100 * d[k]["top_shape_share"], ".0f") + "%", num(100 * d[k]["priciest_best_share"], ".0f") + "%",
             yes(d[k]["passes"])] for k in d]
    return [f"{res.get('plans', '?')} candidates per task, {res.get('repeats', '?')} re-runs each, seed {res.get('seed', '?')}. "
            f"Targets: {PLAN_CHOICE_TARGETS}.",
            "", *table(["domain:source", "tasks", "mean candidate", "expected-quality oracle", "gap (points)",
                        "top shape share", "priciest plan best", "targets met"], rows), ""]


def collect_page(res: Record) -> list[str]:
    rows = [[d, str(r["tasks"]), f"{r['single_process_per_s']:.0f}", f"{r['parallel_per_s']:.0f}", str(r["target_per_s"]),
             yes(r["meets_target"])] for d in res["domains"] for r in [res["domains"][d]]]
    return [
        f"# Collection speed ({res['machine']['cpus']} CPU cores, {res['workers']} workers, {res['plans_per_task']} plans per task)",
        "", "Plan executions per second: one warm process executing every candidate plan of each task, and "
            "`orchrm.execution.collect.collect` with the workers end to end (process start-up, task loading and "
            "building the table included).", "",
            *table(["domain", "tasks", "single process (plans/s)", "parallel, end to end (plans/s)", "target", "met"], rows)]


def collect_section(res: Record) -> list[str]:
    d = res["domains"]
    rows = [[k, str(d[k]["tasks"]), num(d[k]["single_process_per_s"], ".0f"), num(d[k]["parallel_per_s"], ".0f"),
             str(d[k]["target_per_s"]), yes(d[k]["meets_target"])] for k in d]
    return [f"{res.get('workers', '?')} workers, {res.get('plans_per_task', '?')} plans per task.", "",
            *table(["domain", "tasks", "one process (plans/s)", "parallel, end to end (plans/s)", "target (plans/s)", "met"], rows), ""]


def _scale_out_rows(res: Record) -> list[list[str]]:
    sec, ratio = res["seconds"], res["ratio_1_over_2"]
    return [[step, num(sec["1"][key], ".1f"), num(sec["2"][key], ".1f"), num(ratio[key], ".2f") + "x"]
            for step, key in (("collection", "collect"), ("held-out pool", "pool"), ("both", "total"))]


def _scale_out_setup(res: Record) -> str:
    s = res["settings"]
    return (f"{s['domains']} domains: collection of {s['tasks_per_domain']} tasks x {s['plans_per_task']} plans each, held-out "
            f"pool of {s['pool_tasks_per_domain']} tasks x {s['candidates']} candidates ({s['pool_seeds']} execution + "
            f"{s['repeats']} re-runs each); chunks of at most {s['chunk_tasks']} tasks: {res['chunks']['collect']} "
            f"`collect-chunk` and {res['chunks']['pool']} `pool-chunk` task runs")


def scale_out_page(res: Record) -> list[str]:
    runs = [[str(r["workers"]), num(r["collect_s"], ".1f"), num(r["collect_work_s"], ".1f"), num(r["pool_s"], ".1f"),
             num(r["pool_work_s"], ".1f"), " / ".join(map(str, r["chunks_per_worker"]))] for r in res.rows("runs")]
    return [
        f"# Collection scale-out ({res['machine']['cpus']} CPU cores, Dask LocalCluster of 1 and 2 worker processes)", "",
        "Wall time of the pipeline's mapped collection and held-out pool (`orchrm.ops.pipeline.collect_in_chunks`, "
        "`pool_in_chunks`) in a Prefect flow with `pipeline.task_runner: dask` and `pipeline.dask_address` set to the "
        f"cluster's scheduler. {_scale_out_setup(res)}. Best of {res['settings']['rounds']} rounds; every run had a data "
        f"folder of its own (nothing cached) and gave the same tables ({res['rows']['artifacts']:,} artifacts, "
        f"{res['rows']['pool']:,} pool rows): {yes(res['same_tables'])}.", "",
        *table(["step", "1 worker (s)", "2 workers (s)", "1 / 2"], _scale_out_rows(res)), "",
        "Every run:", "", *table(["workers", "collection (s)", "work in its chunks (s)", "pool (s)", "work in its chunks (s)",
                                   "chunks per worker"], runs), "",
        f"Notes: {res['notes']}"]


def scale_out_section(res: Record) -> list[str]:
    return [f"{_scale_out_setup(res)}; best of {res['settings']['rounds']} rounds.", "",
            *table(["step", "1 worker (s)", "2 workers (s)", "1 / 2"], _scale_out_rows(res)), "", f"Notes: {res['notes']}", ""]


def _missed(flag: bool) -> str:
    return "met" if flag else "missed"


def _speed_rows(res: Record) -> list[list[str]]:
    b, v = res["build"], res["validate"]
    return [
        [f"build pairs from {b['artifacts']:,} artifacts ({b['tasks']:,} tasks, cap {b['max_pairs_per_task']}/task)",
         f"{b['pairs']:,} pairs in {b['seconds_best_of_3']} s ({b['pairs_per_second']:,} pairs/s)",
         f"100k pairs < {b['target_seconds_for_100k_pairs']:g} s: {_missed(b['meets_target'])}"],
        [f"GX validation of {v['pairs']:,} pairs ({v['expectations']} expectations, results JSON and Data Docs included)",
         f"{v['seconds_warm_best_of_2']} s warm; {v['seconds_first_call_with_gx_import']} s for the first call (GX import included)",
         f"< {v['target_seconds']:g} s: {_missed(v['meets_target'])} warm, {_missed(v['meets_target_including_import'])} with the import"],
    ]


def _collection_tokens(res: Record) -> list[str]:
    if "collection_tokens" not in res:
        return [f"Not measured: {res.get('collection_skipped', 'skipped')}.", ""]
    setup, c = res["collection_setup"], res["collection_tokens"]
    rows = [[d, str(r["intermediate_pairs"]), str(r["intermediate_tokens_per_pair"] or "-"),
             str(r["intermediate_all_depths_pairs"]), str(r["intermediate_all_depths_tokens_per_pair"] or "-"),
             str(r["correct_over_incorrect_pairs"]), str(r["correct_over_incorrect_tokens_per_pair"] or "-"),
             str(r["token_ratio_correct_over_intermediate"] or "-")] for d in c for r in [c[d]]]
    return [
        f"Sandbox collection, {setup['tasks_per_domain']} tasks x {setup['plans_per_task']} plans per domain, seed "
        f"{setup['seed']}, no per-task cap, the prior source left out. Tokens of the distinct artifacts the pairs rest "
        "on, divided by the number of pairs. `intermediate (prefix)`: node pairs whose two artifacts are not the sink, "
        "counting only the prefix that had to run (the two nodes and their ancestors); `intermediate (all)`: every node "
        "pair, sinks included (a sink's prefix is its whole plan); `correct-over-incorrect`: every artifact of both full "
        "executions. `ratio` = correct-over-incorrect tokens per pair / intermediate (prefix) tokens per pair.", "",
        *table(["domain", "intermediate (prefix) pairs", "tokens / pair", "intermediate (all) pairs", "tokens / pair",
                "correct-over-incorrect pairs", "tokens / pair", "ratio"], rows, right=9), "",
        "Amortised over a task, full rollouts are not expensive per pair: n executed plans give up to n(n-1)/2 plan "
        "pairs. Prefix pairs are fewer, because they need two plans of one task that share a prefix and a same-role "
        "node whose qualities differ by `min_margin`.", ""]


def pairs_page(res: Record) -> list[str]:
    return [
        "# Pairs benchmark", "",
        "Numbers are measured, not targets; the machine's cores were shared with other jobs.", "",
        "## Speed", "", *table(["measurement", "result", "target"], _speed_rows(res), right=9), "",
        "## Collection tokens per usable pair", "", *_collection_tokens(res)]


def pairs_section(res: Record) -> list[str]:
    b, v = res["build"], res["validate"]
    lines = table(["measurement", "result", "target", "met"], [
        [f"build pairs from {num(b['artifacts'], ',')} artifacts ({num(b['tasks'], ',')} tasks)",
         f"{num(b['pairs'], ',')} pairs in {num(b['seconds_best_of_3'], '.3f')} s", f"100k pairs < {num(b['target_seconds_for_100k_pairs'], 'g')} s",
         yes(b["meets_target"])],
        [f"Great Expectations validation of {num(v['pairs'], ',')} pairs ({v['expectations']} expectations)",
         f"{num(v['seconds_warm_best_of_2'], '.3f')} s warm, {num(v['seconds_first_call_with_gx_import'], '.2f')} s first call",
         f"< {num(v['target_seconds'], 'g')} s", yes(v["meets_target"])],
    ], right=9) + [""]
    if "collection_tokens" in res:
        c = res["collection_tokens"]
        lines += ["Collection tokens per usable pair, intermediate (prefix) against correct-over-incorrect:", "",
                  *table(["domain", "intermediate pairs", "tokens / pair", "correct-over-incorrect pairs", "tokens / pair", "ratio"],
                         [[k, str(c[k]["intermediate_pairs"]), num(c[k]["intermediate_tokens_per_pair"], ".1f"),
                           str(c[k]["correct_over_incorrect_pairs"]), num(c[k]["correct_over_incorrect_tokens_per_pair"], ".1f"),
                           num(c[k]["token_ratio_correct_over_intermediate"], ".2f")] for k in c]), ""]
    return lines


BENCHMARKS = {
    "plan_choice": Benchmark(
        "Plan choice", "How much the choice among sampled plans matters: the mean candidate's expected quality against "
        "the best candidate's, how often one plan shape is best, and how often the priciest plan is.",
        plan_choice_page, plan_choice_section),
    "collect": Benchmark("Collection speed", "Plan executions per second, one process and with parallel workers end to end.",
                         collect_page, collect_section),
    "scale_out": Benchmark("Collection scale-out", "The pipeline's collection and held-out pool as mapped Prefect task "
                           "runs on a Dask cluster: wall time with 1 and with 2 worker processes, same config.",
                           scale_out_page, scale_out_section),
    "pairs": Benchmark("Pairs and data gates", "Building win/loss pairs from artifacts, validating them with Great "
                       "Expectations, and the collection tokens each usable pair costs.", pairs_page, pairs_section),
}
