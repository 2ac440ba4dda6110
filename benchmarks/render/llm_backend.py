"""The page of the local LLM backend's benchmark (``llm_backend.json``): load time and tokens/s of
SmolLM2-135M-Instruct through the transformers client, one sequence greedy and k samples batched."""

from __future__ import annotations

from benchmarks.render.records import Benchmark, Record, num, table

_HEADER = ["threads", "call", "sequences", "generated tokens", "s", "tokens/s", "tokens/s per sequence"]


def _rows(res: Record) -> list[list[str]]:
    return [[str(r["threads"]), r["mode"], str(r["sequences"]), str(r["completion_tokens"]), num(r["wall_s"], ".1f"),
             num(r["tokens_per_s"], ".1f"), num(r["tokens_per_s_per_sequence"], ".1f")] for r in res.rows("rows")]


def _batching_gain(res: Record) -> list[str]:
    """One line per thread setting: how many times the batched call's tokens/s the single one's is."""
    rows = res.rows("rows")
    lines = []
    for threads in dict.fromkeys(r["threads"] for r in rows):
        single = next(r for r in rows if r["threads"] == threads and r["sequences"] == 1)
        batch = next(r for r in rows if r["threads"] == threads and r["sequences"] > 1)
        lines.append(f"{threads} thread(s): {batch['sequences']} samples in one batch give "
                     f"{batch['tokens_per_s'] / single['tokens_per_s']:.1f}x the tokens/s of one greedy sequence.")
    return lines


def page(res: Record) -> list[str]:
    m, s, model = res["machine"], res["settings"], res["model"]
    return [
        "# The local LLM backend: SmolLM2-135M-Instruct (GGUF) through transformers on the CPU", "",
        f"Model: `{model['file']}` from the `{model['package']}` wheel, {model['parameters'] / 1e6:.0f}M parameters, "
        f"dequantized to {model['dtype']} on {model['device']}. Each call asks a built-in GSM8K-style question for "
        f"step-by-step reasoning, at most {s['max_tokens']} tokens per completion; the batched call samples "
        f"{s['samples']} completions at temperature {s['temperature']:g} in one `generate` call (SelfConsistency's k "
        "votes). tokens/s = generated tokens (stop token included) / wall time of the call, prompt processing included. "
        f"The machine was shared with other jobs (load average at the end {m['load_average'][0]:.1f}): on a quiet "
        "machine expect more.", "",
        f"Load (tokenizer and weights, dequantized; once per process): **{res['load_s']:.1f} s** "
        f"(imports before it: {res['import_s']:.1f} s).", "",
        *table(_HEADER, _rows(res), align="rlrrrrr"), "",
        *_batching_gain(res), "",
        "Sizing a collection: a plan of k agent calls of about t generated tokens each takes about k * t / (tokens/s) "
        "seconds on this backend; batched samples cost far less per token than the same number of single calls."]


def section(res: Record) -> list[str]:
    return [f"Load: {num(res['load_s'], '.1f')} s (once per process).", "",
            *table(_HEADER, _rows(res), align="rlrrrrr"), "", *_batching_gain(res), ""]


BENCHMARKS = {
    "llm_backend": Benchmark("The local LLM backend", "Load time and tokens/s of SmolLM2-135M-Instruct (GGUF) through the "
                             "transformers client on the CPU: one greedy sequence, and k samples in one batch.", page, section),
}
