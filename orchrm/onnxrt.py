"""Scoring through ONNX Runtime: the rewards of :meth:`BradleyTerryModel.score`, with less overhead on CPU.

>>> scorer = OnnxScorer(model)                 # doctest: +SKIP
>>> scorer.score("What is 2 + 3?", plans)      # doctest: +SKIP   # == model.score(...) within 1e-5

Why: at the size of a test-time-scaling call (one question, 8 short plans, about 150 tokens) the
default encoder's matrix products take 5 to 10 ms on one core (by the machine), and PyTorch's
per-operator dispatch, the attention bookkeeping and the small element-wise kernels add almost as
much again. ONNX Runtime runs the forward pass as one graph of its kernels (prepacked weights,
batched matmuls that read transposed layouts in place) with no Python between operators
(``benchmarks/results/latency.md`` compares the two).

The graph is written directly from the model's weights with ``onnx.helper`` (no tracing, no
exporter), for BERT-family encoders (:func:`orchrm.encoders.supports_shared_prompt`) in either
architecture, and computes what :func:`orchrm.encoders.encode_packed` computes: tokens stay
packed through embeddings, linear layers and pooling. Attention runs in one of two graphs. In
rows padded to their longest, as ``encode_packed`` runs it: ``joint`` rows over themselves;
``shared_prompt`` prompt rows among themselves and action rows over their prompt's keys and
their own. Or, for a ``shared_prompt`` chunk of at most ``DENSE_MAX_TOKENS`` tokens (one
question and a few short plans), densely over all of the chunk's T tokens with a visibility
mask: T² scores instead of the sum over rows, but far fewer operators, which is what counts at
that size. Calls are cut into chunks of at most ``max_tokens`` tokens; one question with 8 plans
is one chunk. The softmax never takes exp() of a masked score's full distance below the row's
maximum (see ``attend`` in :func:`build_graph`): ONNX Runtime's own Attention operator does,
through an additive mask, and exp() of a very negative number runs the CPU's slow denormal path,
which cost that operator more than the matmuls of the attention itself.

The scorer copies the weights when it is built: train the model further and build a new one.
Needs the ``onnx`` extra (``pip install 'orchrm[onnx]'``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from orchrm import encoders
from orchrm.errors import ConfigError
from orchrm.model import DEFAULT_MAX_TOKENS, BradleyTerryModel, ChunkScorer

#: ONNX opset of the graph (Gelu is a standard operator from 20 on)
OPSET = 20
#: ONNX Runtime's own operators (FusedMatMul: a batched matmul that reads transposed layouts)
_CONTRIB = "com.microsoft"
#: a ``shared_prompt`` chunk of at most this many tokens attends densely (one (T, T) mask, the
#: fewest operators); a longer one in padded rows, where T² scores cost more than the extra
#: operators. In ``benchmarks/results/ab_onnx.md``, rows always (``--dense-max-tokens 0``) timed
#: 8 plans of the default model (about 150 tokens) at 1.15x (Intel Xeon) and 1.07x (AMD EPYC);
#: dense always (``--dense-max-tokens 100000 --encoder minilm``) MiniLM's (300 to 500 tokens a
#: chunk) at 1.13x and 1.06x
DENSE_MAX_TOKENS = 256
#: added to the scores of keys a query must not see before taking each row's maximum
_MASKED = float(np.finfo(np.float32).min)
#: before the softmax, every score is raised to at least its row's largest visible score minus
#: this: exp() then never underflows into denormals (which start below exp(-87))
SOFTMAX_FLOOR = 60.0

#: ``transformers`` activation -> (ONNX operator, its attributes)
_ACTIVATIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "gelu": ("Gelu", {}),
    "gelu_new": ("Gelu", {"approximate": "tanh"}),
    "gelu_pytorch_tanh": ("Gelu", {"approximate": "tanh"}),
    "relu": ("Relu", {}),
}


def _import_onnx():
    try:
        import onnx
        import onnxruntime
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ConfigError(
            f"ONNX Runtime scoring needs the 'onnx' extra ({exc.name} is not installed): "
            "pip install 'orchrm[onnx]'"
        ) from exc
    return onnx, onnxruntime


def build_graph(model: BradleyTerryModel, *, dense: bool | None = None):
    """The model's forward pass as an ``onnx.ModelProto`` (weights copied in as fp32 initializers).

    ``dense`` (``shared_prompt`` only, its default): attention over all T tokens of a chunk at
    once, a (T, T) mask saying who sees whom: the fewest operators, but T² scores. Otherwise
    attention runs in rows padded to their longest, as :func:`orchrm.encoders.encode_packed` runs
    it: in ``shared_prompt`` prompt rows among themselves and action rows over their prompt's
    keys and their own; in ``joint`` each row over itself.

    Inputs (:func:`graph_inputs` makes them from a :class:`TokenBatch`): ``input_ids``,
    ``positions``, ``segments`` (T,) int64; ``pool`` (A, T) float32, row i averaging action i's
    pooled tokens. Dense: ``visible`` (T, T) float32, 1 where token i may attend to token j, else
    0. Rows: ``action_rows`` (A, W) int64, the packed token in each slot of the action rows padded
    to W, ``action_visible`` (A, W) float32 (1: a real token), ``unpad`` (T,) int64, each packed
    token's slot (prompt rows' slots first); in ``shared_prompt`` also ``prompt_rows``,
    ``prompt_visible`` (P, Wp) and ``action_prompt`` (A,) int64, each action's prompt row.
    Output: ``rewards`` (A,).
    """
    onnx, _ = _import_onnx()
    from onnx import TensorProto, helper, numpy_helper

    bert = model.encoder
    act = encoders.scorer_activation(bert, _ACTIVATIONS, "ONNX Runtime scoring")
    cfg = bert.config
    heads, width = cfg.num_attention_heads, cfg.hidden_size
    inits: list = []
    nodes: list = []

    def const(name: str, value: Tensor | np.ndarray) -> str:
        array = value.detach().cpu().float().numpy() if isinstance(value, Tensor) else value
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def linear(x: str, layer: torch.nn.Linear, name: str) -> str:
        return node("Gemm", [x, const(f"{name}.weight", layer.weight), const(f"{name}.bias", layer.bias)], name, transB=1)

    def layer_norm(x: str, ln: torch.nn.LayerNorm, name: str) -> str:
        return node(
            "LayerNormalization", [x, const(f"{name}.weight", ln.weight), const(f"{name}.bias", ln.bias)],
            name, axis=-1, epsilon=float(ln.eps),
        )

    def skip_norm(x: str, skip: str, ln: torch.nn.LayerNorm, name: str) -> str:
        return layer_norm(node("Add", [x, skip], f"{name}.sum"), ln, name)

    emb = bert.embeddings
    type_table = emb.token_type_embeddings.weight
    h = node("Gather", [const("emb.word", emb.word_embeddings.weight), "input_ids"], "emb.words")
    h = node("Add", [h, node("Gather", [const("emb.pos", emb.position_embeddings.weight), "positions"], "emb.positions")], "emb.sum1")
    if type_table.shape[0] > 1:  # a single-row table adds the same row to every token (segments are zeroed)
        h = node("Add", [h, node("Gather", [const("emb.type", type_table), "segments"], "emb.types")], "emb.sum2")
    else:
        h = node("Add", [h, const("emb.type0", type_table[0])], "emb.sum2")
    h = layer_norm(h, emb.LayerNorm, "emb.ln")

    shared = model.shared_prompt
    dense = shared if dense is None else dense
    if dense and not shared:
        raise ValueError("dense attention is for the shared_prompt layout; joint rows attend in rows")
    head_dim = width // heads
    as_tokens = const("shape.tokens", np.array([-1, width], dtype=np.int64))
    last = const("axes.last", np.array([-1], dtype=np.int64))
    floor = const("softmax.floor", np.array(SOFTMAX_FLOOR, dtype=np.float32))

    def mask(visible: str, name: str, axes: list[int]) -> str:
        """1/0 visibility, unsqueezed at ``axes`` -> an additive bias: 0 where visible, float32 min elsewhere."""
        keep = node("Unsqueeze", [visible, const(f"{name}.axes", np.array(axes, dtype=np.int64))], f"{name}.keep") if axes else visible
        return node("Mul", [node("Sub", [keep, const(f"{name}.one", np.array(1.0, dtype=np.float32))], f"{name}.off"),
                            const(f"{name}.big", np.array(-_MASKED, dtype=np.float32))], f"{name}.bias")

    def attend(scores: str, values: str, bias: str, p: str, op: str = "MatMul", **attrs: Any) -> str:
        """``op(softmax(scores), values)`` with the softmax over the keys a query may see.

        Not ``Softmax(scores + bias)``: exp() of a masked score (float32 min, or anything below
        about -87 after the row's maximum is subtracted) gives a denormal or takes the CPU's slow
        path to zero, and that cost more than the rest of attention. Here every score is first
        raised to at least the row's largest *visible* score minus ``SOFTMAX_FLOOR``, so exp()
        only ever sees arguments in [-SOFTMAX_FLOOR, 0]: a masked key keeps a weight of at most
        exp(-60) ~ 1e-26 of the row's, far below float32 resolution of the result. A row that
        sees no key at all (never made by :func:`graph_inputs`) averages its values, no NaN.
        """
        biased = node("Add", [scores, bias], f"{p}.biased")
        lowest = node("Sub", [node("ReduceMax", [biased, last], f"{p}.max", keepdims=1), floor], f"{p}.lowest")
        weights = node("Softmax", [node("Max", [biased, lowest], f"{p}.raised")], f"{p}.weights", axis=-1)
        return node(op, [weights, values], f"{p}.ctx_heads", **attrs)

    def in_rows(q: str, k: str, v: str, bias: str, p: str) -> str:
        """Attention in padded rows: (rows, H, W, d) q, k, v -> (rows * W, H * d), one slot per row position."""
        ctx = attend(node("FusedMatMul", [q, k], f"{p}.scores", domain=_CONTRIB, transB=1), v, bias, p)
        return node("Reshape", [node("Transpose", [ctx], f"{p}.ctx_rows", perm=[0, 2, 1, 3]), as_tokens], f"{p}.ctx_slots")

    def heads_of(qkv: str, rows: str, p: str) -> list[str]:
        """The packed (T, 3 * H * d) projections gathered into padded rows: q, k, v (rows, H, W, d)."""
        padded = node("Reshape", [node("Gather", [qkv, rows], f"{p}.padded"), as_rows], f"{p}.qkv4")
        out = [f"{p}.{n}" for n in "qkv"]
        nodes.append(helper.make_node("Split", [node("Transpose", [padded], f"{p}.qkv_heads", perm=[0, 2, 1, 3])], out, axis=1, num_outputs=3))
        return out

    if dense:  # one sequence of all T tokens: keep (T, T)
        as_heads = const("shape.heads", np.array([-1, 3 * heads, head_dim], dtype=np.int64))
        token_mask = mask("visible", "token", [])
    else:  # action rows see their own tokens, in shared_prompt after their prompt's row
        as_rows = const("shape.rows", np.array([0, 0, 3 * heads, head_dim], dtype=np.int64))
        action_visible = "action_visible"
        if shared:
            prompt_mask = mask("prompt_visible", "prompt", [1, 2])
            action_visible = node("Concat", [node("Gather", ["prompt_visible", "action_prompt"], "action.prompt_visible"),
                                             action_visible], "action.visible", axis=1)
        action_mask = mask(action_visible, "action", [1, 2])

    for i, layer in enumerate(bert.encoder.layer):
        p = f"l{i}"
        w, b = encoders.scaled_qkv(layer.attention.self, head_dim)
        qkv = node("Gemm", [h, const(f"{p}.qkv.weight", w), const(f"{p}.qkv.bias", b)], f"{p}.qkv", transB=1)
        if dense:  # (T, 3H, d) -> q, k, v (T, H, d); FusedMatMul reads them as (H, T, d) without a copy
            q, k, v = (f"{p}.{n}" for n in "qkv")
            nodes.append(helper.make_node("Split", [node("Reshape", [qkv, as_heads], f"{p}.qkv3")], [q, k, v], axis=1, num_outputs=3))
            scores = node("FusedMatMul", [q, k], f"{p}.scores", domain=_CONTRIB, transBatchA=1, transBatchB=1, transB=1)
            ctx = attend(scores, v, token_mask, p, "FusedMatMul", domain=_CONTRIB, transBatchB=1)  # (H, T, d)
            o = node("Reshape", [node("Transpose", [ctx], f"{p}.ctx_tokens", perm=[1, 0, 2]), as_tokens], f"{p}.ctx")
        else:
            q, k, v = heads_of(qkv, "action_rows", f"{p}.action")
            slots = []
            if shared:  # prompt rows among themselves; each action row also over its prompt's keys, laid first
                pq, pk, pv = heads_of(qkv, "prompt_rows", f"{p}.prompt")
                slots.append(in_rows(pq, pk, pv, prompt_mask, f"{p}.prompt"))
                k, v = (node("Concat", [node("Gather", [x, "action_prompt"], f"{x}.of_prompt"), y], f"{y}.with_prompt", axis=2)
                        for x, y in ((pk, k), (pv, v)))
            slots.append(in_rows(q, k, v, action_mask, f"{p}.action"))
            all_slots = slots[0] if len(slots) == 1 else node("Concat", slots, f"{p}.slots", axis=0)
            o = node("Gather", [all_slots, "unpad"], f"{p}.ctx")
        out = layer.attention.output
        h = skip_norm(linear(o, out.dense, f"{p}.attn_out"), h, out.LayerNorm, f"{p}.ln1")
        inner = node(act[0], [linear(h, layer.intermediate.dense, f"{p}.inter")], f"{p}.act", **act[1])
        ffn = layer.output
        h = skip_norm(linear(inner, ffn.dense, f"{p}.ffn_out"), h, ffn.LayerNorm, f"{p}.ln2")

    pooled = node("MatMul", ["pool", h], "pooled")
    head = [m for m in model.head if isinstance(m, torch.nn.Linear)]
    hidden = node("Gelu", [linear(pooled, head[0], "head.fc")], "head.act")  # the head's nn.GELU()
    r = node("Reshape", [linear(hidden, head[1], "head.out"), const("shape.r", np.array([-1], dtype=np.int64))], "rewards")

    graph = helper.make_graph(
        nodes,
        "orchrm_reward",
        inputs=[
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["T"]),
            helper.make_tensor_value_info("positions", TensorProto.INT64, ["T"]),
            helper.make_tensor_value_info("segments", TensorProto.INT64, ["T"]),
            *(
                [helper.make_tensor_value_info("visible", TensorProto.FLOAT, ["T", "T"])]
                if dense
                else [
                    *(
                        [
                            helper.make_tensor_value_info("prompt_rows", TensorProto.INT64, ["P", "Wp"]),
                            helper.make_tensor_value_info("prompt_visible", TensorProto.FLOAT, ["P", "Wp"]),
                            helper.make_tensor_value_info("action_prompt", TensorProto.INT64, ["A"]),
                        ]
                        if shared
                        else []
                    ),
                    helper.make_tensor_value_info("action_rows", TensorProto.INT64, ["A", "W"]),
                    helper.make_tensor_value_info("action_visible", TensorProto.FLOAT, ["A", "W"]),
                    helper.make_tensor_value_info("unpad", TensorProto.INT64, ["T"]),
                ]
            ),
            helper.make_tensor_value_info("pool", TensorProto.FLOAT, ["A", "T"]),
        ],
        outputs=[helper.make_tensor_value_info(r, TensorProto.FLOAT, ["A"])],
        initializer=inits,
    )
    proto = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(_CONTRIB, 1)], producer_name="orchrm"
    )
    proto.ir_version = min(proto.ir_version, 10)
    onnx.checker.check_model(proto)
    return proto


def graph_inputs(batch: encoders.TokenBatch, *, dense: bool | None = None) -> dict[str, np.ndarray]:
    """The ONNX inputs of a packed batch for :func:`build_graph`'s graph with the same ``dense``."""
    prompt_lens = batch.prompt_lens.tolist()
    action_lens = batch.action_lens.tolist()
    n_tokens = batch.num_tokens
    prompt_starts = np.cumsum([0, *prompt_lens]).tolist()
    action_starts = (prompt_starts[-1] + np.cumsum([0, *action_lens])).tolist()
    # rows are few (one question and its candidates): slices per row beat (T, T) comparisons
    pool = np.zeros((len(action_lens), n_tokens), dtype=np.float32)
    for i, (end, k) in enumerate(zip(action_starts[1:], batch.pool_lens.tolist(), strict=True)):
        pool[i, end - k : end] = 1.0 / k
    inputs = {
        "input_ids": batch.input_ids.numpy(),
        "positions": batch.positions.numpy(),
        "segments": batch.segments.numpy(),
        "pool": pool,
    }
    shared = batch.action_prompt is not None
    if dense if dense is not None else shared:
        if not shared:
            raise ValueError("dense attention is for the shared_prompt layout; joint rows attend in rows")
        visible = np.zeros((n_tokens, n_tokens), dtype=np.float32)
        for lo, hi in zip(prompt_starts[:-1], prompt_starts[1:], strict=True):
            visible[lo:hi, lo:hi] = 1.0
        for lo, hi, j in zip(action_starts[:-1], action_starts[1:], batch.action_prompt.tolist(), strict=True):
            visible[lo:hi, lo:hi] = 1.0
            visible[lo:hi, prompt_starts[j] : prompt_starts[j + 1]] = 1.0
        inputs["visible"] = visible
        return inputs
    # rows padded to their longest (encode_packed's layout): prompt rows first (shared_prompt),
    # then action rows; ``unpad``: each packed token's slot in those rows, in packed order
    blocks = [(batch.prompt_lens, 0, "prompt")] if shared else []
    blocks.append((batch.action_lens, prompt_starts[-1], "action"))
    unpad, slots_before = [], 0
    for lens, offset, name in blocks:
        rows = encoders._Rows.of(lens, offset)
        slots = torch.arange(rows.rows * rows.width)
        gather = offset + slots if rows.gather_index is None else rows.gather_index
        inputs[f"{name}_rows"] = gather.view(rows.rows, rows.width).numpy()
        inputs[f"{name}_visible"] = rows.valid.float().numpy()
        unpad.append(slots_before + (slots if rows.scatter_index is None else rows.scatter_index))
        slots_before += rows.rows * rows.width
    inputs["unpad"] = torch.cat(unpad).numpy()
    if shared:
        inputs["action_prompt"] = batch.action_prompt.numpy()
    return inputs


def session_options(threads: int, *, spinning: bool = False):
    """The ``onnxruntime.SessionOptions`` of a scorer's sessions: ``threads`` intra-op threads, every
    graph optimisation, quiet logs, spinning threads or not (see :class:`OnnxScorer`)."""
    _, ort = _import_onnx()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    return options


class OnnxScorer(ChunkScorer):
    """Scores (prompt, action) texts like :meth:`BradleyTerryModel.score`, through ONNX Runtime on the CPU.

    ``threads``: ONNX Runtime's intra-op threads (default: ``torch.get_num_threads()``).
    ``max_tokens``: the most tokens one chunk holds. ``spinning``: let ONNX Runtime's threads
    busy-wait for work between operators and calls (its own default). Off here: on each 2-CPU
    machine of ``benchmarks/results/latency.md`` (and ``latency_spinning/`` beside it; the others in
    their history) spinning made MiniLM's two-thread scoring 35 to 40% slower and the default
    model's 7 to 20% faster, it takes cores from whatever else the process does between calls, and
    several spinning scorers in one process slow each other.
    """

    def __init__(
        self,
        model: BradleyTerryModel,
        *,
        threads: int | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        spinning: bool = False,
    ) -> None:
        _import_onnx()  # without the extra, fail here, naming it
        super().__init__(model, threads=threads, max_tokens=max_tokens)
        self._options = session_options(self.threads, spinning=spinning)
        #: the graphs (weights copied now), by ``dense``: row-wise always, dense for ``shared_prompt``
        self.graphs = {False: build_graph(model, dense=False)}
        if model.shared_prompt:
            self.graphs[True] = build_graph(model, dense=True)
        self._sessions: dict[bool, Any] = {}

    def dense_for(self, batch: encoders.TokenBatch) -> bool:
        """Whether ``batch`` runs through the dense graph (``shared_prompt``, at most ``DENSE_MAX_TOKENS`` tokens)."""
        return True in self.graphs and batch.num_tokens <= DENSE_MAX_TOKENS

    def session(self, *, dense: bool):
        """The ONNX Runtime session of the dense or the row-wise graph, made on first use."""
        if dense not in self._sessions:
            _, ort = _import_onnx()
            self._sessions[dense] = ort.InferenceSession(
                self.graphs[dense].SerializeToString(), self._options, providers=["CPUExecutionProvider"]
            )
        return self._sessions[dense]

    def _run(self, batch: encoders.TokenBatch) -> np.ndarray:
        """The rewards of one packed chunk, through the dense graph or the row-wise one."""
        dense = self.dense_for(batch)
        return self.session(dense=dense).run(None, graph_inputs(batch, dense=dense))[0]
