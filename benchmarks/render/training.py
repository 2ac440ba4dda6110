"""The pages of the training benchmarks: held-out pairwise accuracy (``accuracy.json``), the
Trainer against TRL's with its GPU section (``train.json``), the training-defaults sweep
(``sweep_defaults.json``)."""

from __future__ import annotations

from benchmarks.render.records import Benchmark, Record, ci, met, num, provenance_lines, table


def _accuracy_cell(r: Record) -> str:
    return f"{r['accuracy']:.3f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]"


def accuracy_page(res: Record) -> list[str]:
    rows, col = res.rows("rows"), res["collection"]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    domains = sorted({r["domain"] for r in rows})
    splits = ", ".join(f"{k} {col['splits'][k]}" for k in col["splits"])
    body = ["# Held-out pairwise accuracy per domain (sandbox)", "", f"{col['tasks_per_domain']} tasks per domain x {col['plans_per_task']} plans (seed {col['seed']}); {col['pairs']} "
            f"pairs, split by task ({splits}). Trained on `train` (early stopping on `val` with patience 2, at "
            f"most {res['epochs']} epochs), scored on the **test tasks**. Cells: accuracy [95% interval, bootstrap over "
            "tasks]; chance is 0.5.", ""]
    for granularity in ("plan", "node"):
        sub = [r for r in rows if r["granularity"] == granularity]
        if not sub:
            continue
        counts = {r["domain"]: (r["pairs"], r["tasks"]) for r in sub}
        shown = [d for d in domains if d in counts]
        cells = {(r["method"], r["domain"]): r for r in sub}
        body += [f"## {granularity}-level pairs", "",
                 *table(["method", *(f"{d} ({counts[d][0]} pairs, {counts[d][1]} tasks)" for d in shown)],
                        [[m, *(_accuracy_cell(cells[(m, d)]) if (m, d) in cells else "n/a" for d in shown)] for m in methods]),
                 ""]
    body += ["## Training runs", "",
             "Training speed is measured by `python -m benchmarks.train`; this run shared the machine, so its times are "
             "not quoted.", "",
             *table(["encoder", "epochs run", "best epoch", "val accuracy", "train pairs"],
                    [[r["encoder"], str(r["epochs_run"]), str(r["best_epoch"]), f"{r['best_val_accuracy']:.3f}", str(r["train_pairs"])]
                     for r in res.rows("runs")])]
    return body


def accuracy_section(res: Record) -> list[str]:
    rows = [r for r in res.rows("rows") if r["granularity"] == "plan"]
    domains = sorted({r["domain"] for r in rows})
    cells = {(r["method"], r["domain"]): r for r in rows}
    body = [[m, *(ci(c["accuracy"], c["ci95"][0], c["ci95"][1]) if (c := cells.get((m, d))) else "n/a" for d in domains)]
            for m in dict.fromkeys(r["method"] for r in rows)]
    return ["Plan-level pairs of held-out test tasks, accuracy [95% interval over tasks]; chance is 0.5.", "",
            *table(["method", *domains], body), ""]


def _target_line(res: Record) -> str:
    target = res["target"]
    return (f"Target (the default `shared_prompt`): >= {num(target['speedup'], 'g')}x TRL's pairs/s at "
            f"{target.get('accuracy', 'equal or better')} accuracy: **{met(res['default_meets_target'])}**.")


def _gpu_page_section(res: Record) -> list[str]:
    if "gpu" not in res:
        return ["## GPU", "", "Not measured yet: `python -m benchmarks.gpu_train` on a machine with CUDA adds this section.", ""]
    g = res["gpu"]
    s = g["settings"]
    rows = [[r["architecture"], r["precision"], f"{r['pairs_per_second']:.1f}",
             "-" if r["peak_memory_mib"] is None else f"{r['peak_memory_mib']:.0f}", f"{r['test_accuracy']:.3f}"]
            for r in g.rows("rows")]
    return ["## GPU", "",
            f"{g['device']}, MiniLM, {g['train_pairs']} plan pairs, {s['epochs']} epochs, {s['batch_size']} pairs per step, "
            f"max_length {s['max_length']}.", "",
            *table(["layout", "precision", "pairs/s", "peak memory MiB", "test accuracy"], rows, right=2), "",
            *(["The GPU run (the CPU run's command, commit and machine end the page):", "", *provenance_lines("gpu_train", g)]
              if "command" in g else ["The GPU section records no command, commit or machine."]), ""]


def train_page(res: Record) -> list[str]:
    s, m = res["settings"], res["machine"]
    rows = [[r["method"], f"{r['pairs_per_second']:.2f}", f"{r['speedup_vs_trl']:.2f}x", f"{r['train_seconds']:.0f}",
             f"{r['test_accuracy']:.3f}", f"{r['accuracy_minus_trl']:+.3f}"] for r in res.rows("rows")]
    return [
        "# Training: OrchRM Trainer vs TRL RewardTrainer (MiniLM, CPU, fp32)", "",
        f"{res['train_pairs']} plan-level training pairs from {res['train_tasks']} sandbox tasks, {s['epochs']} epochs, "
        f"{s['batch_size']} pairs per step, lr {s['lr']}, max_length {s['max_length']}; accuracy on {res['test_pairs']} "
        f"pairs of {res['test_tasks']} held-out test tasks. {m['cpus']} CPUs ({m['cpu']}) shared with other jobs (load "
        f"average at the end {m['load_average'][0]:.1f}).", "",
        *table(["trainer", "pairs/s", "speed-up vs TRL", "train s", "test accuracy", "vs TRL"], rows), "",
        _target_line(res), "", *_gpu_page_section(res)]


def train_section(res: Record) -> list[str]:
    rows = [[r["method"], num(r["pairs_per_second"], ".2f"), num(r["speedup_vs_trl"], ".2f") + "x",
             num(r["train_seconds"], ".0f"), num(r["test_accuracy"]), num(r["accuracy_minus_trl"], "+.3f")]
            for r in res.rows("rows")]
    lines = [*table(["trainer", "pairs/s", "speed-up vs TRL", "train s", "test accuracy", "vs TRL"], rows), "",
             _target_line(res), ""]
    if "gpu" in res:
        g = res["gpu"]
        lines += [f"GPU ({g['device']}):", "", *table(["architecture", "precision", "pairs/s", "peak MiB", "test accuracy"], [
            [r["architecture"], r.get("precision", "?"), num(r["pairs_per_second"], ".1f"), num(r.get("peak_memory_mib"), ".0f"),
             num(r["test_accuracy"])] for r in g.rows("rows")]), ""]
    return lines


def _encoder_name(model: Record) -> str:
    """``minilm (train_layers 0)``: the encoder and any other setting the run names."""
    rest = ", ".join(f"{k} {model[k]}" for k in model if k != "encoder")
    return f"{model['encoder']} ({rest})" if rest else str(model["encoder"])


def sweep_defaults_page(res: Record) -> list[str]:
    runs = res.rows("runs_out")
    pairs = res["pairs"]
    rows = [[r["name"], _encoder_name(r["model"]), f"{r['train']['lr']:g}", str(r["train"]["epochs"]), str(r["train"]["patience"]),
             f"{r['epochs_run']} ({r['best_epoch']})", f"{r['best_val_loss']:.4f}", f"{r['test_pair_accuracy']:.3f}",
             f"{r['true_pair_accuracy']:.3f}", f"{r['seconds']:.0f}"] for r in runs]
    return [
        "# Sweep of the training defaults: encoder x learning rate, early stopping", "",
        f"Support-desk traces (`orchrm/execution/support_desk.py`) at tuning seed {res['seed']}: {res['tickets']} tickets x "
        f"6 plans x {res['runs']} runs, through ingest and the default pair settings: {pairs['train']} train / {pairs['val']} "
        f"val / {pairs['test']} test pairs. Each run: at most the epochs shown, early stopping after `patience` evaluations "
        "without a lower validation loss, best weights restored, one thread. **true-pair acc**: held-out tickets "
        f"({runs[0]['held_out_tickets'] if runs else 0}), every pair of plans whose expected quality differs, ordered by "
        "the model; **test acc**: the held-out pair table (labels from noisy 0/1 runs).", "",
        *table(["run", "encoder", "lr", "max epochs", "patience", "epochs run (best)", "best val loss", "test acc",
                "true-pair acc", "train s"], rows, right=2), "",
        *(f"{r['name']}: {r['note']}." for r in runs if r.get("note")), "",
        "train s: wall time on a machine shared with other jobs; it says which runs are long, not how fast one is."]


def sweep_defaults_section(res: Record) -> list[str]:
    rows = [[r["name"], _encoder_name(r["model"]), num(r["train"]["lr"], "g"), str(r["train"].get("patience", "?")),
             f"{r['epochs_run']} ({r['best_epoch']})", num(r["best_val_loss"], ".4f"), num(r["test_pair_accuracy"]),
             num(r["true_pair_accuracy"]), num(r["seconds"], ".0f")] for r in res.rows("runs_out")]
    return [*table(["run", "encoder", "lr", "patience", "epochs run (best)", "best val loss", "test acc", "true-pair acc",
                    "train s"], rows, right=2), ""]


def _nightly_table(res: Record) -> list[str]:
    rows = [[str(i + 1), num(r["seconds"], ".0f"), str(r["epochs_run"]), str(r["best_epoch"]), num(r["pairs_per_second"], ".0f")]
            for i, r in enumerate(res.rows("runs"))]
    t = res["target"]
    return [*table(["run", "wall s (orchrm train, start to saved model)", "epochs run", "best epoch", "training pairs/s"],
                   rows, right=4), "",
            f"Target: a retrain on {t['pairs']} pairs in under {num(t['seconds'], '.0f')} s on 2 CPU cores: "
            f"**{met(res['met'])}** (slowest run {num(res['worst_seconds'], '.0f')} s).", "", *_ensemble_lines(res),
            *_config_lines(res)]


def _ensemble_lines(res: Record) -> list[str]:
    """The opt-in ensembles (``orchrm train --members N``) timed on the same pairs, if any."""
    rows = [[f"--members {r['members']}", num(r["seconds"], ".0f"), str(r["epochs_run"]), str(r["best_epoch"]),
             num(r["pairs_per_second"], ".0f")] for r in res.get("ensembles") or []]
    if not rows:
        return []
    return ["The opt-in ensemble on the same pairs (its members trained one after another; epochs and best epochs per member):", "",
            *table(["orchrm train", "wall s", "epochs run", "best epoch", "training pairs/s"], rows, right=4), ""]


def _config_lines(res: Record) -> list[str]:
    """Candidate defaults (``orchrm train --config``) timed on the same pairs in the same run, if any."""
    rows = [[f"`{c['config']}`", " / ".join(num(r["seconds"], ".0f") for r in c["runs"]),
             " / ".join(str(r["epochs_run"]) for r in c["runs"]), met(c["met"])] for c in res.get("configs") or []]
    if not rows:
        return []
    return ["Other configs on the same pairs, in the same run (`orchrm train --config`):", "",
            *table(["config", "wall s per run", "epochs run", "target"], rows, right=2), ""]


def nightly_page(res: Record) -> list[str]:
    c, m = res["collection"], res["machine"]
    return ["# A nightly retrain of the default model", "",
            f"`orchrm train` with the built-in model and training settings, in a process of its own, on {res['pairs']} pairs "
            f"drawn from the {res['pairs_available']} that the built-in collection gives ({c['tasks_per_domain']} tasks per "
            f"domain, {c['plans_per_task']} plans each, every plan run {c['repeats']} times). {m['cpus']} CPUs ({m['cpu']}), "
            f"{m.get('torch_threads', '?')} torch threads.", "", *_nightly_table(res)]


def nightly_section(res: Record) -> list[str]:
    return _nightly_table(res)


BENCHMARKS = {
    "nightly_retrain": Benchmark("Nightly retrain time", "The default model retrained on 10k pairs by `orchrm train`, "
                                 "start to saved model.", nightly_page, nightly_section),
    "accuracy": Benchmark("Held-out pairwise accuracy", "How often each encoder (and two baselines) orders a held-out pair right.",
                          accuracy_page, accuracy_section),
    "train": Benchmark("Training speed", "OrchRM's Trainer against TRL's RewardTrainer on the same pairs: throughput and "
                       "held-out accuracy.", train_page, train_section),
    "sweep_defaults": Benchmark("Training defaults sweep", "Encoder x learning rate x early stopping on a support desk's "
                                "traces, judged on held-out tickets.", sweep_defaults_page, sweep_defaults_section),
}
