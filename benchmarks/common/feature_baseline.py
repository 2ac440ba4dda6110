"""A non-neural reward model that can read the question: pairwise logistic regression on
question features crossed with plan features (issue 24: what the text allows).

The reward of a plan ``a`` for a question ``q`` is bilinear, ``r(q, a) = phi(a) . W psi(q)``:

- ``psi(q)``: a constant 1, the task's domain (one-hot), the domain module's own
  ``question_features`` (:func:`orchrm.execution.tasks.base.plan_heuristic`: what the specialized
  sampler reads; z-scored) and hashed word uni- and bigrams of the question (unit norm);
- ``phi(a)``: :func:`plan_features` of the plan text (z-scored).

So ``W`` holds one weight per (question feature, plan feature): logistic regression on the crossed
features ``psi(q) x phi(a)``. Its row for the constant 1 scores the plan alone, the domain rows a
per-domain prior, the rest what the question itself says. The Bradley-Terry loss
``-log sigmoid(r_chosen - r_rejected)`` is logistic regression on the crossed feature differences
``psi(q) x (phi(chosen) - phi(rejected))`` (a pair shares its question), with an L2 penalty; ``W``
is fitted in that factored form by L-BFGS, so the crossed matrix is never built.

>>> model = PairwiseLogit(QuestionFeatures(question_features=False, bits=8))
>>> pairs = pd.DataFrame({"prompt": ["use search"] * 4 + ["think hard"] * 4, "domain": "x", "split": "train",
...     "chosen": [SEARCH, SEARCH, SEARCH, SEARCH, COT, COT, COT, COT],
...     "rejected": [COT, COT, COT, COT, SEARCH, SEARCH, SEARCH, SEARCH]})
>>> r = model.fit(pairs).score(["use search", "think hard"], [SEARCH, SEARCH], domains=["x", "x"])
>>> bool(r[0] > r[1])
True
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, sparse

from orchrm.plans import AGENT_TYPES, Plan

#: two small plans of the docstring's example
SEARCH = '<agent id="a1" type="WebSearch" queries="1" top_k="3"/>\n<agent id="a2" type="CoT" model="small"/>\n<edge from="a1" to="a2"/>'
COT = '<agent id="a1" type="CoT" model="large"/>'

_AGENTS = tuple(AGENT_TYPES)
#: the integer settings of the agent types (``SelfConsistency.k``, ``Debate.rounds``, ...)
_SETTINGS = tuple(f"{t.name}.{p.name}" for t in AGENT_TYPES.values() for p in t.params)
#: the names of :func:`plan_features`, in order
PLAN_FEATURES: tuple[str, ...] = (
    *(f"has.{a}" for a in _AGENTS), *(f"count.{a}" for a in _AGENTS), *(f"large.{a}" for a in _AGENTS),
    *(f"sink.{a}" for a in _AGENTS), *(f"max.{s}" for s in _SETTINGS),
    "nodes", "edges", "depth", "width", "large_nodes", "sink_large", "log_cost",
)
_WORD = re.compile(r"[a-z0-9]+")


def plan_features(text: str) -> np.ndarray:
    """The plan's structure as numbers (:data:`PLAN_FEATURES`): which agent types it calls, how
    many of each and how many on the large tier, the sink's type, the largest setting of each
    type (``k``, ``agents``, ``rounds``, ``iterations``, ``queries``, ``top_k``; 0 when absent),
    node and edge counts, depth (longest path, in nodes), width (most nodes at one depth), large-tier
    nodes, whether the sink runs on the large tier, and ``log1p`` of the rough cost
    (:func:`orchrm.execution.tasks.base.plan_cost`). Of a node-level action (an agent line and its
    output) only the plan lines are read."""
    from orchrm.execution.tasks.base import plan_cost

    plan = Plan.parse("\n".join(line for line in text.split("\n") if line.lstrip().startswith(("<agent ", "<edge "))))
    f = dict.fromkeys(PLAN_FEATURES, 0.0)
    for n in plan.nodes:
        f[f"has.{n.agent}"] = 1.0
        f[f"count.{n.agent}"] += 1.0
        f[f"large.{n.agent}"] += float(n.model == "large")
        for p in AGENT_TYPES[n.agent].params:
            f[f"max.{n.agent}.{p.name}"] = max(f[f"max.{n.agent}.{p.name}"], float(n.int_param(p.name)))
    sink = plan.node(plan.sink)
    depths = plan.depths()
    f[f"sink.{sink.agent}"] = 1.0
    f |= {"nodes": float(len(plan.nodes)), "edges": float(len(plan.edges)), "depth": float(max(depths.values()) + 1),
          "width": float(max(np.bincount(list(depths.values())))), "large_nodes": float(sum(n.model == "large" for n in plan.nodes)),
          "sink_large": float(sink.model == "large"), "log_cost": math.log1p(plan_cost(plan))}
    return np.array([f[k] for k in PLAN_FEATURES])


def ngrams(question: str) -> list[str]:
    """The lowercased word uni- and bigrams of ``question``."""
    words = _WORD.findall(question.lower())
    return [*words, *(f"{a} {b}" for a, b in zip(words, words[1:], strict=False))]


@dataclass(frozen=True)
class QuestionFeatures:
    """Which parts of ``psi(q)`` the model reads besides the constant: the ``domain`` one-hot, the
    domain's ``question_features``, and word uni/bigrams hashed into ``2**bits`` buckets."""

    domain: bool = True
    question_features: bool = True
    ngrams: bool = True
    bits: int = 10
    #: the sandbox's own latent description of the task (:func:`latent_features`), looked up by
    #: question text: not what a reader of the text has, what a perfect reader could extract
    latent: bool = False
    #: how much of that description (one of :data:`LATENT_VIEWS`)
    latent_view: str = "all"
    #: with what the question asks (a web question's attribute, a multihop question's relations)
    latent_asked: bool = False

    def __post_init__(self) -> None:
        if self.latent_view not in LATENT_VIEWS:
            raise ValueError(f"latent_view {self.latent_view!r}: choose one of {', '.join(LATENT_VIEWS)}")

    @property
    def latent_kind(self) -> tuple[str, bool]:
        """Which latent table the model reads: ``(latent_view, latent_asked)``."""
        return self.latent_view, self.latent_asked


def _domain_features(domain: str | None, question: str) -> dict[str, float]:
    """``domain``'s own question features of ``question`` (``{}`` for a domain without any)."""
    from orchrm.execution.tasks.base import plan_heuristic

    heuristic = plan_heuristic(domain) if domain else None
    if heuristic is None:
        return {}
    return {f"{domain}:{k}": float(v) for k, v in heuristic.features(question).items()}


#: fields of a sandbox domain's task state that are machinery, not a description of the task
_MACHINERY = frozenset({"task_id", "index", "world", "corpus", "context", "page_values", "tiers", "texts", "calcs", "searches",
                        "reference", "program", "canonical_code", "summary", "first_query", "test_prelude", "memory_key",
                        "misread_value", "gold", "subject", "asked", "entry_point"})


#: how much of a task's latent description a reader gets (:func:`latent_features`): ``all`` of it;
#: ``named``: of the entities' popularity only that of the entity the question names; ``shown``:
#: that entity's popularity as its name shows it (:func:`shown_popularity`), what the text holds
LATENT_VIEWS = ("all", "named", "shown")


def _syllables(word: str) -> int:
    return len(re.findall(r"[aeiou]+", word.lower()))


def shown_popularity(name: str, etype: str) -> str | None:
    """How well known an entity of ``etype`` looks from its ``name``: ``famous``, ``known`` or
    ``obscure``, read by the naming rules of :func:`orchrm.execution.tasks.qa.make_name` (obscure
    entities get long, specific names; a name follows its entity's popularity four times in five,
    so this is what the text shows, not the truth). None where the name shows nothing (countries).

    >>> shown_popularity("Giallorhi J. Lardem-Gergriabou", "person"), shown_popularity("Rerdim Brothers Studios", "company")
    ('obscure', 'known')
    >>> shown_popularity("Vehar Broubudam", "person"), shown_popularity("Nocturne for Nine Crowns (1961 short)", "film")
    ('known', 'obscure')
    """
    if etype == "person":
        if re.search(r"\b[A-Z]\. \S+-", name):
            return "obscure"
        return "famous" if _syllables(name.split()[-1]) <= 1 else "known"
    if etype == "company":
        return "obscure" if "&" in name else "known" if " Brothers " in name else "famous"
    if etype == "film":
        if name.endswith("short)"):
            return "obscure"
        return "known" if name.startswith("The ") and " of " in name else "famous"
    if etype in ("city", "town"):
        if "-" in name or name.startswith(("Upper ", "Lower ")):
            return "obscure"
        if " " in name or re.search(r"(ton|burg)$", name):
            return "known"
        # a bare word: every famous city's form, one known city's in six (a two-syllable word)
        return "famous"
    return None


def _named_entity(task: Any, state: Any) -> tuple[str, str] | None:
    """The (name, type) of the entity a built-in multihop or web question names, else None."""
    if hasattr(state, "hops"):  # a knowledge-graph question names the first hop's subject
        e = state.world.entities[state.hops[0][0]]
        return e.name, e.type
    if "entity" in task.metadata and "world" in task.metadata and hasattr(state, "subject"):
        from orchrm.execution.tasks.webqa import build_corpus

        e = build_corpus(int(task.metadata["world"])).entities[str(task.metadata["entity"])]
        return e.name, e.type
    return None


def _popularity(task: Any, state: Any, view: str) -> list[str]:
    """The popularity categories ``view`` reads of a task (each counted): every hop's subject of a
    knowledge-graph question, every fact of a StrategyQA one, a web question's subject; of those
    ``named`` keeps the entity the question names (a StrategyQA question names no fact) and
    ``shown`` reads that one off its name."""
    if hasattr(state, "hops"):
        subjects = [state.world.entities[s] for s, _, _ in state.hops]
        found = [e.popularity for e in (subjects if view == "all" else subjects[:1])]
    else:
        value = getattr(state, "popularity", ())
        found = [value] if isinstance(value, str) else ([] if view != "all" else list(value))
    if view == "shown" and found:
        named = _named_entity(task, state)
        # SQuAD's popularity is itself read off the question's text: shown as it is
        shown = shown_popularity(*named) if named else found[0]
        found = [shown] if shown else []
    return found


def _asked(state: Any) -> list[str]:
    """What a question asks, as categories: each hop's relation of a knowledge-graph question, the
    attribute of a web question; none for the other domains (their state has no such field)."""
    if hasattr(state, "hops"):
        return [f"relation={rel}" for _, rel, _ in state.hops]
    if isinstance(getattr(state, "asked", None), str):
        return [f"asked={state.asked}"]
    return []


def latent_features(task: Any, backend: Any, view: str = "all", *, asked: bool = False) -> dict[str, float]:
    """What the sandbox itself knows of ``task`` (its domain's prepared state, which decides
    every outcome) as numbers: each numeric or boolean field, the size of each collection, the
    entities' ``popularity`` categories counted (how much of them: ``view``, one of
    :data:`LATENT_VIEWS`), for math the chance a lone run of each tier is right (the simulator's
    own difficulty), and with ``asked`` what the question asks (:func:`_asked`, counted: the state's
    words, which the rest leaves out). A question's text only hints at most of these; a model
    reading them bounds what a reader of the text could learn from the same pairs, as far as they
    describe the task.

    >>> from orchrm.execution.sandbox.engine import SandboxBackend
    >>> from orchrm.execution.tasks.base import load_tasks
    >>> f = latent_features(load_tasks("math", 1, seed=0)[0], SandboxBackend())
    >>> 0 < f["p_ok.small"] <= f["p_ok.large"] <= 1
    True
    """
    import dataclasses

    if view not in LATENT_VIEWS:
        raise ValueError(f"view {view!r}: choose one of {', '.join(LATENT_VIEWS)}")
    dom = backend.domain(task)
    state = dom.state(task)
    out: dict[str, float] = {}
    for field in dataclasses.fields(state):
        if field.name in _MACHINERY or field.name == "popularity":
            continue
        value = getattr(state, field.name)
        if isinstance(value, bool | int | float):
            out[field.name] = float(value)
        elif isinstance(value, tuple | list | frozenset | set | dict):
            out[f"len.{field.name}"] = float(len(value))
    for key in [f"popularity={p}" for p in _popularity(task, state, view)] + (_asked(state) if asked else []):
        out[key] = out.get(key, 0.0) + 1.0
    if hasattr(dom, "lone_run_chance"):  # math: the chance a lone run of each tier is right
        for tier in backend.tiers:
            out[f"p_ok.{tier}"] = float(dom.lone_run_chance(state, tier))
        steps = [s for s in state.steps if s.comp]
        out["max_digits"] = float(max((s.digits for s in steps), default=0))
        out["decimals"] = float(any(s.decimals for s in steps))
        for _, kind in state.traps:
            out[f"trap={kind}"] = out.get(f"trap={kind}", 0.0) + 1.0
    return out


def latent_table(tasks: Sequence[Any], backend: Any, view: str = "all", *, asked: bool = False) -> dict[str, dict[str, float]]:
    """:func:`latent_features` (``view``, ``asked``) of each task by its question (as the pairs'
    prompts give it: :func:`orchrm.model.texts.task_text`), every task of a domain with the same
    names (a count a task lacks is 0)."""
    from orchrm.model.texts import task_text

    feats = {task_text(t.question): (t.domain, latent_features(t, backend, view, asked=asked)) for t in tasks}
    names: dict[str, set[str]] = {}
    for domain, f in feats.values():
        names.setdefault(domain, set()).update(f)
    return {q: {k: f.get(k, 0.0) for k in sorted(names[domain])} for q, (domain, f) in feats.items()}


def _signed_log(x: float) -> float:
    return math.copysign(math.log1p(abs(x)), x)


class PairwiseLogit:
    """The bilinear pairwise logistic regression of the module docstring. ``fit`` a pair table
    (columns ``prompt``, ``chosen``, ``rejected``, ``domain``, ``split``), then ``score`` any
    (question, plan) texts. ``l2``: the penalty, or the grid searched on the ``val`` split (by
    BT loss; the model is then refitted on ``train``)."""

    def __init__(self, features: QuestionFeatures = QuestionFeatures(), *, l2: float | Sequence[float] = (1e-3, 1e-2, 0.1, 0.3, 1.0, 3.0, 10.0),
                 max_iter: int = 500, latent: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self.features = features
        if features.latent and latent is None:
            raise ValueError("QuestionFeatures(latent=True) needs latent=: each question's latent_features")
        self.latent = latent or {}
        self.l2_grid = (l2,) if isinstance(l2, float | int) else tuple(l2)
        self.max_iter = max_iter
        self.l2: float | None = None
        self.val_loss: dict[float, float] = {}
        self._plans: dict[str, np.ndarray] = {}

    # -- features ---------------------------------------------------------------------------
    def _plan(self, text: str) -> np.ndarray:
        if text not in self._plans:
            self._plans[text] = plan_features(text)
        return self._plans[text]

    def _plan_matrix(self, texts: Sequence[str]) -> np.ndarray:
        return (np.stack([self._plan(t) for t in texts]) - self._plan_mean) / self._plan_std

    def _raw_question(self, question: str, domain: str | None) -> dict[str, float]:
        """``psi(q)`` before scaling, by feature name (n-grams as ``#<bucket>``)."""
        out = {"1": 1.0}
        if domain and self.features.domain:
            out[f"domain={domain}"] = 1.0
        if domain and self.features.question_features:
            out |= {k: _signed_log(v) for k, v in _domain_features(domain, question).items()}
        if domain and self.features.latent:
            if question not in self.latent:
                raise KeyError(f"no latent features for the {domain} question {question[:60]!r}; pass every question's")
            out |= {f"{domain}:latent.{k}": _signed_log(v) for k, v in self.latent[question].items()}
        if self.features.ngrams:
            grams = ngrams(question)
            buckets = {f"#{zlib.crc32(g.encode()) % 2**self.features.bits}" for g in grams}
            out |= dict.fromkeys(sorted(buckets), 1.0 / math.sqrt(len(buckets)) if buckets else 0.0)
        return out

    def _learn_question_space(self, questions: Sequence[tuple[str, str | None]]) -> None:
        """The columns of ``psi``: every feature and n-gram bucket the training questions have (one
        they never have would keep a zero weight anyway), and the z-scoring of the domain features."""
        raw = [self._raw_question(q, d) for q, d in questions]
        self._columns = {k: i for i, k in enumerate(sorted({k for r in raw for k in r}))}
        self._q_mean, self._q_std = {}, {}
        for k in self._columns:
            if ":" in k:  # a domain's question feature: z-scored over the questions of that domain
                values = np.array([r[k] for r in raw if k in r])
                self._q_mean[k], self._q_std[k] = float(values.mean()), float(values.std()) or 1.0

    def _question_matrix(self, questions: Sequence[tuple[str, str | None]]) -> sparse.csr_matrix:
        cache: dict[tuple[str, str | None], dict[int, float]] = {}
        rows, cols, vals = [], [], []
        for i, key in enumerate(questions):
            if key not in cache:
                cache[key] = {self._columns[name]: (v - self._q_mean[name]) / self._q_std[name] if name in self._q_mean else v
                              for name, v in self._raw_question(*key).items() if name in self._columns}
            for j, v in cache[key].items():
                rows.append(i)
                cols.append(j)
                vals.append(v)
        return sparse.csr_matrix((vals, (rows, cols)), shape=(len(questions), len(self._columns)))

    # -- fitting ----------------------------------------------------------------------------
    def _design(self, pairs: pd.DataFrame) -> tuple[sparse.csr_matrix, np.ndarray, np.ndarray]:
        """``(Q, index, D)``: ``psi(q)`` of each distinct (question, domain) of ``pairs`` (sparse,
        questions x question features), each pair's row of ``Q`` and its ``phi(chosen) -
        phi(rejected)`` (pairs x plan features). A task's pairs share one question, so ``Q`` has
        a row per task, not per pair."""
        from orchrm.model.texts import task_text

        keys = pd.MultiIndex.from_arrays([[task_text(p) for p in pairs["prompt"]], pairs["domain"].astype(object)])
        index, unique = pd.factorize(keys)
        q = self._question_matrix([(question, None if pd.isna(domain) else domain) for question, domain in unique])
        return q, index, self._plan_matrix(list(pairs["chosen"])) - self._plan_matrix(list(pairs["rejected"]))

    @staticmethod
    def _margins(W: np.ndarray, q: sparse.csr_matrix, index: np.ndarray, d: np.ndarray) -> np.ndarray:
        """``r_chosen - r_rejected`` of every pair."""
        return np.einsum("ij,ij->i", np.asarray(q @ W.T)[index], d)

    @classmethod
    def _loss(cls, w: np.ndarray, q: sparse.csr_matrix, index: np.ndarray, d: np.ndarray, l2: float) -> tuple[float, np.ndarray]:
        """Mean BT loss of the pairs plus ``l2 / 2 * |W|^2``, and its gradient (``w``: W flattened,
        plan features x question features). The gradient sums ``dloss/ds * D`` per question
        first, then meets ``Q`` once per question."""
        W = w.reshape(d.shape[1], q.shape[1])
        s = cls._margins(W, q, index, d)
        loss = float(np.logaddexp(0.0, -s).mean()) + 0.5 * l2 * float(w @ w)
        g = -np.exp(-np.logaddexp(0.0, s)) / len(s)  # d loss / d s = -sigmoid(-s) / n
        per_question = np.zeros((q.shape[0], d.shape[1]))
        np.add.at(per_question, index, d * g[:, None])
        grad = np.asarray(q.T @ per_question).T + l2 * W
        return loss, grad.ravel()

    def _solve(self, q: sparse.csr_matrix, index: np.ndarray, d: np.ndarray, l2: float) -> np.ndarray:
        w0 = np.zeros(d.shape[1] * q.shape[1])
        res = optimize.minimize(self._loss, w0, args=(q, index, d, l2), jac=True, method="L-BFGS-B",
                                options={"maxiter": self.max_iter})
        return res.x.reshape(d.shape[1], q.shape[1])

    def _learn_spaces(self, pairs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The ``train`` and ``val`` rows of ``pairs`` (all rows train when it has no ``split``),
        after learning the z-scoring of the plan features and the question columns from ``train``."""
        from orchrm.model.texts import task_text

        split = pairs["split"] if "split" in pairs.columns else pd.Series("train", index=pairs.index)
        train, val = pairs[split == "train"], pairs[split == "val"]
        texts = pd.unique(pd.concat([train["chosen"], train["rejected"]]))
        plans = np.stack([self._plan(t) for t in texts])
        self._plan_mean, self._plan_std = plans.mean(0), np.where(plans.std(0) > 0, plans.std(0), 1.0)
        self._learn_question_space(list(dict.fromkeys((task_text(p), d) for p, d in zip(train["prompt"], train["domain"], strict=True))))
        return train, val

    def fit(self, pairs: pd.DataFrame) -> PairwiseLogit:
        """Fit on the ``train`` rows of ``pairs`` (all rows when it has no ``split``); with more
        than one ``l2``, each is fitted and the one with the lowest BT loss on the ``val`` rows kept."""
        train, val = self._learn_spaces(pairs)
        design = self._design(train)
        if len(self.l2_grid) > 1 and len(val):
            held = self._design(val)
            for l2 in self.l2_grid:
                W = self._solve(*design, l2)
                self.val_loss[l2] = float(np.logaddexp(0.0, -self._margins(W, *held)).mean())
                if self.l2 is None or self.val_loss[l2] < self.val_loss[self.l2]:
                    self.l2, self.W = l2, W
        else:
            self.l2 = self.l2_grid[0]
            self.W = self._solve(*design, self.l2)
        return self

    # -- scoring ----------------------------------------------------------------------------
    def score(self, prompts: Sequence[str], actions: Sequence[str], *, domains: Sequence[str | None] | None = None) -> np.ndarray:
        """Rewards of (question, plan) texts; ``domains``: each question's domain (None: not
        known, as for an empty question; then only the constant and the n-grams are read)."""
        from orchrm.model.texts import task_text

        domains = [None] * len(prompts) if domains is None else list(domains)
        q = self._question_matrix([(task_text(p), d) for p, d in zip(prompts, domains, strict=True)])
        return np.einsum("ij,ij->i", np.asarray(q @ self.W.T), self._plan_matrix(list(actions)))

    def _described_features(self) -> dict[str, Any]:
        read = ("domain", "question_features", "ngrams", "bits", "latent", "latent_view", "latent_asked")
        return {"question_features": {k: getattr(self.features, k) for k in read},
                "plan_features": len(PLAN_FEATURES)}

    def describe(self) -> dict[str, Any]:
        """What a results file records of the fit: the features read, the chosen ``l2`` and the
        validation loss of each tried."""
        return {**self._described_features(), "weights": int(self.W.size), "l2": self.l2,
                "val_bt_loss": {f"{k:g}": round(v, 4) for k, v in self.val_loss.items()}}


class PairwiseMLP(PairwiseLogit):
    """A reader that is not bilinear: ``r(q, a) = MLP([psi(q), phi(a)])``, two hidden layers of
    ``hidden`` ReLU units on the same question and plan features as :class:`PairwiseLogit`
    (z-scored plan features; the question's constant, domain, features, latent description or
    n-grams as chosen), fitted with the Bradley-Terry loss on the same pairs. Where the bilinear
    model can only weigh each plan feature by a linear function of the question, this one can learn
    "retrieval helps when the subject is rare *and* the question has two hops": if it gains no more
    from the question than the bilinear model on the same features, the pairs, not the form of the
    reader, are what runs out. Fitted by Adam with weight decay, full passes in a seeded order, the
    epoch with the lowest BT loss on the ``val`` rows kept (``epochs`` at most, ``patience`` without
    improvement); ``l2`` is the grid of (decoupled, AdamW) weight decays tried the same way. The
    defaults were chosen by validation loss on the default config's pairs: with little decay the
    net fits the noise of three executions per plan within a few epochs.

    >>> model = PairwiseMLP(QuestionFeatures(question_features=False, bits=8), l2=1e-2, lr=3e-3, epochs=60)
    >>> pairs = pd.DataFrame({"prompt": ["use search"] * 4 + ["think hard"] * 4, "domain": "x", "split": "train",
    ...     "chosen": [SEARCH] * 4 + [COT] * 4, "rejected": [COT] * 4 + [SEARCH] * 4})
    >>> r = model.fit(pairs).score(["use search", "think hard"], [SEARCH, SEARCH], domains=["x", "x"])
    >>> bool(r[0] > r[1])
    True
    """

    def __init__(self, features: QuestionFeatures = QuestionFeatures(), *, l2: float | Sequence[float] = (1.0, 3.0, 10.0, 30.0),
                 hidden: int = 64, epochs: int = 200, patience: int = 20, lr: float = 1e-3, batch_size: int = 256,
                 seed: int = 0, latent: Mapping[str, Mapping[str, float]] | None = None) -> None:
        super().__init__(features, l2=l2, latent=latent)
        self.hidden, self.epochs, self.patience, self.lr, self.batch_size, self.seed = hidden, epochs, patience, lr, batch_size, seed
        self.best_epoch: dict[float, int] = {}

    def _questions(self, prompts: Sequence[str], domains: Sequence[str | None]) -> np.ndarray:
        """``psi(q)`` of each prompt, dense (a missing domain, None or NaN, reads as none)."""
        from orchrm.model.texts import task_text

        return self._question_matrix([(task_text(p), None if d is None or (isinstance(d, float) and math.isnan(d)) else d)
                                      for p, d in zip(prompts, domains, strict=True)]).toarray()

    def _inputs(self, questions: np.ndarray, actions: Sequence[str]) -> Any:
        import torch

        return torch.from_numpy(np.hstack([questions, self._plan_matrix(list(actions))]).astype(np.float32))

    def _pair_inputs(self, pairs: pd.DataFrame) -> tuple[Any, Any]:
        q = self._questions(list(pairs["prompt"]), list(pairs["domain"]))  # a pair's two plans share its question
        return self._inputs(q, list(pairs["chosen"])), self._inputs(q, list(pairs["rejected"]))

    def _net(self, width: int) -> Any:
        import torch

        torch.manual_seed(self.seed)
        return torch.nn.Sequential(torch.nn.Linear(width, self.hidden), torch.nn.ReLU(),
                                   torch.nn.Linear(self.hidden, self.hidden), torch.nn.ReLU(), torch.nn.Linear(self.hidden, 1))

    def _train(self, train: tuple[Any, Any], val: tuple[Any, Any] | None, l2: float) -> tuple[Any, float, int]:
        """The net fitted with weight decay ``l2``: its state at the epoch of the lowest ``val``
        loss (the last epoch without ``val``), that loss (nan without ``val``) and that epoch."""
        import copy

        import torch
        import torch.nn.functional as F

        net = self._net(train[0].shape[1])
        opt = torch.optim.AdamW(net.parameters(), lr=self.lr, weight_decay=l2)
        order = torch.Generator().manual_seed(self.seed)
        best, best_loss, best_epoch, since = copy.deepcopy(net.state_dict()), math.inf, 0, 0
        n = len(train[0])
        for epoch in range(1, self.epochs + 1):
            net.train()
            for idx in torch.randperm(n, generator=order).split(self.batch_size):
                loss = F.softplus(net(train[1][idx]) - net(train[0][idx])).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            if val is None:
                best, best_epoch = net.state_dict(), epoch
                continue
            net.eval()
            with torch.no_grad():
                val_loss = float(F.softplus(net(val[1]) - net(val[0])).mean())
            if val_loss < best_loss - 1e-5:
                best, best_loss, best_epoch, since = copy.deepcopy(net.state_dict()), val_loss, epoch, 0
            elif (since := since + 1) >= self.patience:
                break
        net.load_state_dict(best)
        return net.eval(), best_loss if val is not None else math.nan, best_epoch

    def fit(self, pairs: pd.DataFrame) -> PairwiseMLP:
        """Fit on the ``train`` rows of ``pairs``; each weight decay of ``l2`` is tried and the net
        with the lowest BT loss on the ``val`` rows kept (without ``val`` rows: the first ``l2``,
        every epoch)."""
        import torch

        train, val = self._learn_spaces(pairs)
        with torch.inference_mode(False):
            x_train = self._pair_inputs(train)
            x_val = self._pair_inputs(val) if len(val) else None
            for l2 in self.l2_grid if x_val is not None else self.l2_grid[:1]:
                net, loss, epoch = self._train(x_train, x_val, l2)
                self.val_loss[l2], self.best_epoch[l2] = loss, epoch
                if self.l2 is None or loss < self.val_loss[self.l2]:
                    self.l2, self.net = l2, net
        return self

    def score(self, prompts: Sequence[str], actions: Sequence[str], *, domains: Sequence[str | None] | None = None) -> np.ndarray:
        import torch

        domains = [None] * len(prompts) if domains is None else list(domains)
        with torch.no_grad():
            return self.net(self._inputs(self._questions(prompts, domains), actions)).squeeze(-1).double().numpy()

    def describe(self) -> dict[str, Any]:
        return {**self._described_features(), "hidden": self.hidden, "weights": int(sum(p.numel() for p in self.net.parameters())),
                "l2": self.l2, "best_epoch": self.best_epoch.get(self.l2),
                "val_bt_loss": {f"{k:g}": round(v, 4) for k, v in self.val_loss.items()}}
