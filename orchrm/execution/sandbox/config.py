"""Every noise parameter of the sandbox, documented in one place: the ``sandbox:`` section of
:class:`orchrm.config.PipelineConfig`.

The sandbox (DESIGN §4) computes what can be computed (arithmetic, code execution, BM25) and
models with seeded randomness only what an LLM would think. This file holds all of those
probabilities and weights, grouped by where they act:

- :class:`TierConfig` — what a model tier costs and how skilled it is;
- :class:`GenericNoise` — behaviour shared by every domain (debate conformity, over-correction);
- one class per domain — the effects that make the best plan depend on the question.

It is configuration only (pydantic, no simulator): the sandbox package imports nothing when it
is loaded, so loading a config, or a saved model, imports no simulator and no task suite (DESIGN
§2). The simulators read it; ``orchrm.execution.sandbox.noise`` re-exports it. Its sections share
the base of every config section (:class:`orchrm.util.frozen.FrozenConfig`).

The values are set once from first principles and a look at the sandbox's own statistics on the
built-in generators; they are never tuned to make a benchmark figure look better. Change them
in YAML under ``sandbox:`` (see ``configs/default.yaml``); unknown keys are rejected.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from orchrm.util.frozen import FrozenConfig

#: The trap phrasings a math question can show: the keys of ``orchrm.execution.tasks.math.TRAPS`` (a unit
#: test checks that the two agree). Listed here so that validating ``math.trap_misread`` imports
#: no task suite.
MATH_TRAP_KINDS: tuple[str, ...] = (
    "twice_minus",
    "percent_of_percent",
    "of_remaining",
    "how_many_more",
    "fewer_than",
    "half_as_many",
    "times_as_many",
    "more_than",
    "percent",
)


class TierConfig(FrozenConfig):
    """A model tier. ``cost_weight`` multiplies its tokens in the ``cost`` column (price ratio);
    ``skill`` in (0, 1] scales every per-step error probability of the domains (lower is better:
    an error rate ``p`` becomes ``p * skill``)."""

    cost_weight: float = Field(1.0, gt=0)
    skill: float = Field(1.0, gt=0, le=1.0)


def _default_tiers() -> dict[str, TierConfig]:
    return {
        "small": TierConfig(cost_weight=1.0, skill=1.0),
        "large": TierConfig(cost_weight=5.0, skill=0.35),
    }


class GenericNoise(FrozenConfig):
    """Agent behaviour shared by all domains.

    - ``debate_conform``: per debate round, the chance that a debater holding a minority answer
      adopts the majority's (Debate converges, right or wrong); otherwise it critiques its own
      answer without tools.
    - ``overcorrect``: per Reflexion iteration, the chance that a tier "fixes" a correct answer
      into a wrong one (hurts on easy questions).
    - ``confidence_noise``: standard deviation of the agents' self-reported confidence around
      their true chance of being right (the trajectory-level selector reads it).
    """

    debate_conform: dict[str, float] = Field(default_factory=lambda: {"small": 0.7, "large": 0.5})
    overcorrect: dict[str, float] = Field(default_factory=lambda: {"small": 0.12, "large": 0.02})
    confidence_noise: float = Field(0.2, ge=0.0)


class MathNoise(FrozenConfig):
    """math (GSM8K style); the simulator is ``orchrm/execution/sandbox/math.py``.

    A reasoning run replays the solution's steps. Rates are for a tier of ``skill`` 1 (the
    small tier) unless keyed by tier; ``TierConfig.skill`` multiplies the arithmetic rates.
    Scale, from first principles: a mid-size model slips on roughly one step in ten of a
    grade-school solution (half of it systematic), a four-times-stronger model on one in
    thirty; it misreads the classic traps ("4 less than twice", stacked percentages) about
    half the time, a strong model a third as often; it knows "a dozen" and rarely "a gross".

    Arithmetic (independent per step and sample; SelfConsistency can vote them away):

    - ``step_error``: chance of setting a step up wrong (a wrong quantity or operation),
      whatever its arithmetic; the share ``setup_shared`` of it is systematic (drawn once per
      plan execution and tier, like a trap misread, so more samples of the tier repeat it) and
      the rest independent per sample;
    - ``op_error``: chance of a slip per operator of the step, by operator (mental ``*`` and
      ``/`` fail more often than ``+``/``-``);
    - ``digit_error``: added per operand digit beyond ``free_digits`` (long numbers are where
      models drop a carry), by the step's hardest operator;
    - ``decimal_error``: added when an operand has decimals (money, rates);
    - ``max_step_error``: cap on a step's slip probability;
    - ``op_slip_share``: share of slips that apply the wrong operator instead of a digit error.

    Traps (correlated): a tier misreads a trap phrasing once per plan execution, and then
    every sample and node of that tier computes the step the misread way:

    - ``trap_misread``: probability per execution by trap kind (keys of
      ``orchrm.execution.tasks.math.TRAPS``) for the small tier;
    - ``trap_tier``: multiplier by tier (a stronger model misreads less).

    Knowledge (correlated): a step using a fact the question does not state (a gross, a
    fortnight) uses the tier's recollection, wrong once per execution with probability
    ``fact_miss[tier] * obscurity`` (obscurity per fact in ``orchrm.execution.tasks.math.FACTS``),
    unless a retrieved document states the fact.

    Distraction: retrieved documents that state no needed fact (worked examples of similar
    problems, unrelated unit tables) add ``distract_error[tier]`` to every step's error
    probability when ``distract_saturation`` or more are in the prompt (proportionally
    below); such an error copies a number from a document into the step.

    Checking (Reflexion with a calculator: ``tools``; a debater re-reading: no tools). Each
    check covers ``check_span[tier]`` steps (all of a shorter solution) and finds an error
    with a probability by kind: ``calc_detect`` / ``recheck_detect`` for slips;
    ``trap_detect_tools`` / ``trap_detect_recheck`` for a misread (a calculator confirms the
    misread arithmetic, so only re-reading the question finds it); ``distract_detect`` (tools)
    and half of it (no tools) for a copied number; ``fact_detect_docs`` when a document states
    the fact, else ``fact_detect_memory``. A reviewer that itself misreads a step (a trap or a
    systematic set-up error) "corrects" a right step into its misreading with probability
    ``misread_enforce``; a Reflexion critique
    also second-guesses one correct step with ``generic.overcorrect[tier]``.

    Drafts: an agent that reads a parent's solution copies each of its wrong steps with
    probability ``draft_anchor[tier]`` and makes ``draft_relief`` times fewer slips on its
    right steps.
    """

    step_error: float = Field(0.05, ge=0.0, le=1.0)
    setup_shared: float = Field(0.5, ge=0.0, le=1.0)
    op_error: dict[str, float] = Field(default_factory=lambda: {"+": 0.015, "-": 0.02, "*": 0.035, "/": 0.04})
    digit_error: dict[str, float] = Field(default_factory=lambda: {"+": 0.008, "-": 0.01, "*": 0.02, "/": 0.02})
    free_digits: int = Field(3, ge=0)
    decimal_error: float = Field(0.03, ge=0.0, le=1.0)
    max_step_error: float = Field(0.5, ge=0.0, le=1.0)
    op_slip_share: float = Field(0.3, ge=0.0, le=1.0)
    trap_misread: dict[str, float] = Field(
        default_factory=lambda: {
            "twice_minus": 0.5,
            "percent_of_percent": 0.55,
            "of_remaining": 0.45,
            "how_many_more": 0.3,
            "fewer_than": 0.35,
            "half_as_many": 0.3,
            "times_as_many": 0.2,
            "more_than": 0.1,
            "percent": 0.2,
        }
    )
    trap_tier: dict[str, float] = Field(default_factory=lambda: {"small": 1.0, "large": 0.3})
    fact_miss: dict[str, float] = Field(default_factory=lambda: {"small": 0.65, "large": 0.3})
    distract_error: dict[str, float] = Field(default_factory=lambda: {"small": 0.035, "large": 0.012})
    distract_saturation: int = Field(8, ge=1)
    check_span: dict[str, int] = Field(default_factory=lambda: {"small": 4, "large": 6})
    calc_detect: dict[str, float] = Field(default_factory=lambda: {"small": 0.8, "large": 0.92})
    recheck_detect: dict[str, float] = Field(default_factory=lambda: {"small": 0.3, "large": 0.45})
    trap_detect_tools: dict[str, float] = Field(default_factory=lambda: {"small": 0.2, "large": 0.5})
    trap_detect_recheck: dict[str, float] = Field(default_factory=lambda: {"small": 0.05, "large": 0.15})
    distract_detect: dict[str, float] = Field(default_factory=lambda: {"small": 0.4, "large": 0.7})
    fact_detect_docs: float = Field(0.9, ge=0.0, le=1.0)
    fact_detect_memory: dict[str, float] = Field(default_factory=lambda: {"small": 0.05, "large": 0.2})
    misread_enforce: float = Field(0.5, ge=0.0, le=1.0)
    draft_anchor: dict[str, float] = Field(default_factory=lambda: {"small": 0.6, "large": 0.35})
    draft_relief: float = Field(0.5, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _known_keys(self) -> MathNoise:
        unknown = set(self.trap_misread) - set(MATH_TRAP_KINDS)
        if unknown:
            raise ValueError(f"math.trap_misread: unknown trap kind(s) {', '.join(sorted(unknown))}; use {', '.join(MATH_TRAP_KINDS)}")
        for name in ("op_error", "digit_error"):
            bad = set(getattr(self, name)) - set("+-*/")
            if bad:
                raise ValueError(f"math.{name}: keys are the operators + - * /, not {', '.join(sorted(bad))}")
        return self


class CodeNoise(FrozenConfig):
    """code (HumanEval); the simulator is ``orchrm/execution/sandbox/code.py``.

    A coder writes the canonical solution with bug-injecting AST mutations (off-by-one,
    comparison swap, wrong constant, operator swap, dropped statement, wrong library call);
    every program is then really executed (docstring examples, hidden tests). Rates are for a
    tier of ``skill`` 1 (the small tier); ``TierConfig.skill`` multiplies ``bug_*`` and
    ``api_bug_*``; tables keyed by tier hold what does not scale with skill.

    Independent slips (each sample draws its own; voting on the examples' outputs can remove
    them when the examples exercise them):

    - ``bug_base``: expected slips per solution regardless of length (signature, return type);
    - ``bug_per_statement``: expected slips per statement of the solution (longer code, more
      bugs), drawn as a Poisson count, each a mutation at a random site. With the tiers' skills
      these put a single CoT at a mean pass rate of about 0.6 (small) and 0.8 (large) over
      HumanEval's 164 problems: a 7B-class and a frontier-class coder;
    - ``api_bug_common`` / ``api_bug_rare``: chance of a slip per call of a library function
      (misremembered semantics: argument order, bounds, return type; written as a swap to a
      sibling function or a dropped argument), for functions every coder uses daily
      (``sorted``, ``str.split``, ``str.join``, ... ``orchrm.execution.sandbox.code.COMMON_APIS``)
      and for the rest (``ord``, ``bin``, ``round``, ``str.swapcase``, ``math.ceil``,
      ``collections.Counter``, ...); the trivial ones (``len``, ``range``, ``sum``, ...) have none;
    - ``doc_relief``: share of that slip chance removed for a function whose documentation a
      WebSearch put in the prompt.

    Traps (correlated): a docstring with trap phrasings (``except``, ``unless``, ``strictly``,
    ``in reverse``, ``empty``, ... see ``orchrm.execution.tasks.code.TRAP_CUES``) has a trap strength
    ``min(1, cues / trap_cue_saturation)``; once per plan execution and tier, the tier misreads
    it with probability ``trap_misread[tier] * strength``, and then every program that tier
    writes in the execution carries the same condition mutation (one of up to three of the
    task's condition mutations that really fail some hidden tests but not all: right on ordinary
    inputs, wrong on the nuance), so votes cannot remove it. The docstring examples, executed,
    reveal some of these misreadings and not others.

    Checking. ``Reflexion`` (tools) runs the docstring examples for real: when one fails it
    rewrites the program (a fresh sample), and if the failure exposed the misread trap it
    re-reads the spec correctly with probability ``trap_fix_feedback[tier]``; when all pass it
    "refactors" working code into a new bug with ``generic.overcorrect[tier] * refactor_scale``
    (over-correction), else re-reads it and fixes what it finds. A debater's unaided re-read (no
    tools) finds each independent slip with ``reread_fix[tier]`` (never a misread trap: the tier
    reads the spec the same way twice) and breaks a program it finds nothing wrong with with
    ``reread_break[tier]``. Unaided self-correction changes right answers into wrong ones about
    as often as the reverse, or more (Huang et al., "Large Language Models Cannot Self-Correct
    Reasoning Yet", ICLR 2024), hence ``reread_break`` close to ``reread_fix`` for the small tier.

    Retrieval: each query the WebSearch agent writes names a library function the solution
    needs with probability ``query_api_recall[tier]`` (``query_api_recall_default`` without a
    tier), else a function guessed from the words of the prompt (or, with no guess, the
    docstring's first sentence). Irrelevant context derails models that would otherwise be
    right (Shi et al., "Large Language Models Can Be Easily Distracted by Irrelevant Context",
    ICML 2023): documents that cover none of the solution's library calls distract: with
    probability ``distraction[tier] * (1 - coverage) * min(1, docs / distraction_docs)`` the
    coder adds a wrong library call (coverage: the share of the solution's library functions
    documented in the prompt).

    Drafts: an agent that reads a parent's program starts from it with probability
    ``draft_anchor[tier]`` (copying its bugs, then re-reading it), else writes its own.

    Execution limits of the sandbox (not noise, but part of how quality is measured):
    ``check_timeout_s`` per test or example, ``job_timeout_s`` per program, ``memory_mb``.

    Every table keyed by tier must name every tier of ``NoiseConfig.tiers`` (checked when the
    domain is built).
    """

    bug_base: float = Field(0.1, ge=0.0)
    bug_per_statement: float = Field(0.1, ge=0.0)
    api_bug_common: float = Field(0.05, ge=0.0, le=1.0)
    api_bug_rare: float = Field(0.3, ge=0.0, le=1.0)
    doc_relief: float = Field(0.8, ge=0.0, le=1.0)
    trap_cue_saturation: float = Field(3.0, gt=0.0)
    trap_misread: dict[str, float] = Field(default_factory=lambda: {"small": 0.7, "large": 0.3})
    trap_fix_feedback: dict[str, float] = Field(default_factory=lambda: {"small": 0.5, "large": 0.8})
    refactor_scale: float = Field(1.0, ge=0.0)
    reread_fix: dict[str, float] = Field(default_factory=lambda: {"small": 0.1, "large": 0.25})
    reread_break: dict[str, float] = Field(default_factory=lambda: {"small": 0.08, "large": 0.03})
    query_api_recall: dict[str, float] = Field(default_factory=lambda: {"small": 0.5, "large": 0.8})
    query_api_recall_default: float = Field(0.5, ge=0.0, le=1.0)
    distraction: dict[str, float] = Field(default_factory=lambda: {"small": 0.3, "large": 0.15})
    distraction_docs: int = Field(6, ge=1)
    draft_anchor: dict[str, float] = Field(default_factory=lambda: {"small": 0.6, "large": 0.4})
    check_timeout_s: float = Field(0.5, gt=0.0)
    job_timeout_s: float = Field(3.0, gt=0.0)
    memory_mb: int = Field(512, ge=64)


class QaNoise(FrozenConfig):
    """What the question-answering domains share (:class:`MultihopNoise`, :class:`WebqaNoise`;
    the simulator is ``orchrm/execution/sandbox/qa.py``).

    A reader answers each fact from its document when that is in context, else from the tier's
    memory. Tables are keyed by tier, then (for memory) by the fact's popularity (``famous`` |
    ``known`` | ``obscure``); a tier missing from a table borrows the value of the listed tier
    with the closest ``TierConfig.skill``. ``extract_error``, ``distractor_pull`` and
    ``trap_misread`` have no shared default: each domain sets its own.

    Memory — a FIXED property of (tier, fact), drawn by hashing, so every sample of a tier
    remembers the same way (voting cannot repair it; retrieval or a larger tier can):

    - ``recall``: chance the tier holds the right value. Popular facts are seen often in
      pre-training text, so they are recalled far more often than obscure ones.
    - ``misremember``: chance it holds a wrong value confidently. The remainder
      ``1 - recall - misremember`` is "does not know": each sample guesses among
      ``guess_pool`` plausible candidates (one of them right), independently.

    Reading (per sample):

    - ``extract_error``: misreading the right document (a wrong value it states).
    - ``distractor_pull``: per other document in context, the chance to be swayed by it
      (lost-in-the-middle); it also applies to facts answered from memory when documents are
      in context, which is how retrieval hurts questions the tier already knows.

    Traps and critique:

    - ``trap_misread``: per plan execution and tier, the chance the tier misreads a trap
      phrasing and answers the salient sibling fact — every sample and every node of that tier
      in the execution shares it.
    - ``trap_fix``: a Reflexion critique (with tools) notices the misreading when the right
      document is in reach; ``trap_fix_no_doc`` when it only has the question to re-read.
    - ``verify_fix``: Reflexion re-reads the documents and repairs a wrong answer it can check
      (the right document is in reach); missing knowledge without documents stays missing.
    - ``rethink_fix``: a debater re-thinking without tools repairs a document-reading error or
      a misreading.
    - ``overcorrect_doc_factor``: multiplies ``generic.overcorrect`` when the documents the
      answer rests on are in reach (a re-read document anchors the answer).
    """

    recall: dict[str, dict[str, float]] = Field(
        default_factory=lambda: {
            "small": {"famous": 0.85, "known": 0.45, "obscure": 0.08},
            "large": {"famous": 0.96, "known": 0.75, "obscure": 0.25},
        }
    )
    misremember: dict[str, dict[str, float]] = Field(
        default_factory=lambda: {
            "small": {"famous": 0.08, "known": 0.25, "obscure": 0.30},
            "large": {"famous": 0.02, "known": 0.12, "obscure": 0.25},
        }
    )
    guess_pool: int = Field(4, ge=1)
    extract_error: dict[str, float]
    distractor_pull: dict[str, float]
    trap_misread: dict[str, float]
    trap_fix: dict[str, float] = Field(default_factory=lambda: {"small": 0.35, "large": 0.65})
    trap_fix_no_doc: dict[str, float] = Field(default_factory=lambda: {"small": 0.12, "large": 0.3})
    verify_fix: dict[str, float] = Field(default_factory=lambda: {"small": 0.6, "large": 0.85})
    rethink_fix: dict[str, float] = Field(default_factory=lambda: {"small": 0.15, "large": 0.3})
    overcorrect_doc_factor: float = Field(0.5, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _memory_tables_are_distributions(self):
        for tier, recall in self.recall.items():
            wrong = self.misremember.get(tier)
            if wrong is None or set(recall) != set(wrong) or set(recall) != {"famous", "known", "obscure"}:
                raise ValueError(f"{self.__class__.__name__}: recall and misremember need famous/known/obscure values for tier {tier!r}")
            for pop, p in recall.items():
                if min(p, wrong[pop]) < 0.0 or p + wrong[pop] > 1.0:
                    raise ValueError(f"{self.__class__.__name__}: recall + misremember must lie in [0, 1] (tier {tier!r}, {pop})")
        return self


class MultihopNoise(QaNoise):
    """multihop (knowledge graph / StrategyQA). See orchrm/execution/sandbox/multihop.py.

    A reasoner resolves the question hop by hop (one fact per hop: a relation of the entity
    resolved so far). A hop is read from the entity's document when it is in context, else
    recalled from the tier's memory; memory tables are keyed by the popularity of the hop's
    subject. Shared with webqa and described in :class:`QaNoise`: ``recall``,
    ``misremember`` (a wrong memory is often a similar entity's value), ``guess_pool``,
    ``distractor_pull``, ``trap_fix``, ``trap_fix_no_doc``, ``rethink_fix``. Here:

    Reading documents (per hop, independent across samples):

    - ``extract_error``: misreading the right document (a wrong entity it names).
    - ``near_miss_pull``: with a near-miss entity's document in context (a similar name,
      different facts), the chance to take its value instead (doubled when the right
      document is missing: nothing to compare with).
    - ``distractor_pull``: as in :class:`QaNoise`, per hop.

    Traps (relations phrased "before it relocated", "before the current one"; StrategyQA's
    quantifiers and negations):

    - ``trap_misread``: the chance to misread the phrasing and answer the salient sibling fact
      (the current headquarters), shared by the execution as in :class:`QaNoise`.

    Critique:

    - ``verify_fix``: Reflexion repairs a hop whose entity's document is in reach.
    - ``overcorrect_doc_factor``: applies when every document of the chain is in reach.

    StrategyQA (yes/no from facts):

    - ``reason_error``: combining right facts into the wrong yes/no.
    - ``wrong_fact_flips``: chance that a wrongly held fact flips the conclusion (a wrong fact
      does not always matter).
    """

    extract_error: dict[str, float] = Field(default_factory=lambda: {"small": 0.06, "large": 0.02})
    near_miss_pull: dict[str, float] = Field(default_factory=lambda: {"small": 0.30, "large": 0.12})
    distractor_pull: dict[str, float] = Field(default_factory=lambda: {"small": 0.008, "large": 0.003})
    trap_misread: dict[str, float] = Field(default_factory=lambda: {"small": 0.80, "large": 0.35})
    reason_error: dict[str, float] = Field(default_factory=lambda: {"small": 0.12, "large": 0.05})
    wrong_fact_flips: float = Field(0.7, ge=0.0, le=1.0)


class WebqaNoise(QaNoise):
    """webqa (built-in corpus / SQuAD). See orchrm/execution/sandbox/webqa.py.

    A reader answers one fact: from the gold page when it is in context, else from memory
    (keyed by the fact's popularity). Shared with multihop and described in
    :class:`QaNoise`: ``recall``, ``misremember``, ``guess_pool``, ``distractor_pull``,
    ``trap_fix``, ``trap_fix_no_doc``, ``rethink_fix``. Here:

    Reading (per sample):

    - ``extract_error``: a wrong span from the gold page itself (another field, another
      answer in the paragraph).
    - ``span_boundary``: a span cut one word short or long (partial F1; SQuAD's multi-word
      answers).
    - ``lookalike_pull``: per look-alike page in context (the entity's archived profile, a
      similarly named entity, another paragraph of the same article), the chance to take its
      value. A *specific* question names qualifiers that tell the pages apart: the pull is
      multiplied by ``specific_factor`` and is a slip, independent per sample. A *vague* question
      is genuinely ambiguous: the tier settles on one reading per execution (shared by all its
      samples, so voting cannot help; a smaller top_k, a larger tier or no search can). Without
      the gold page in context the reader has nothing to compare with and the pull doubles.
      SQuAD's look-alikes are the other paragraphs of the article: they share the topic, not
      the fact, so their pull is multiplied by ``passage_factor``.
    - ``distractor_pull``: as in :class:`QaNoise`, per other page.

    Traps ("before the current one", negations, first/last) and critique:

    - ``trap_misread``: the chance to misread the phrasing and answer the salient
      neighbouring fact (the current CEO), consistently, as in :class:`QaNoise`.
    - ``verify_fix``: Reflexion re-reads the gold page and repairs a wrong answer; for an answer
      taken from a look-alike page on a vague question it is multiplied by ``vague_fix_factor``
      (the question does not say which page is meant).
    - ``overcorrect_doc_factor``: applies when the gold page is in reach.
    """

    extract_error: dict[str, float] = Field(default_factory=lambda: {"small": 0.08, "large": 0.03})
    span_boundary: dict[str, float] = Field(default_factory=lambda: {"small": 0.15, "large": 0.06})
    lookalike_pull: dict[str, float] = Field(default_factory=lambda: {"small": 0.30, "large": 0.12})
    specific_factor: float = Field(0.25, ge=0.0, le=1.0)
    passage_factor: float = Field(0.1, ge=0.0, le=1.0)
    distractor_pull: dict[str, float] = Field(default_factory=lambda: {"small": 0.01, "large": 0.004})
    trap_misread: dict[str, float] = Field(default_factory=lambda: {"small": 0.75, "large": 0.3})
    vague_fix_factor: float = Field(0.5, ge=0.0, le=1.0)


class NoiseConfig(FrozenConfig):
    """All sandbox parameters. ``tiers`` must name every tier used by ``generic``'s tables."""

    tiers: dict[str, TierConfig] = Field(default_factory=_default_tiers)
    generic: GenericNoise = Field(default_factory=GenericNoise)
    math: MathNoise = Field(default_factory=MathNoise)
    code: CodeNoise = Field(default_factory=CodeNoise)
    multihop: MultihopNoise = Field(default_factory=MultihopNoise)
    webqa: WebqaNoise = Field(default_factory=WebqaNoise)

    @model_validator(mode="after")
    def _tiers_cover_tables(self) -> NoiseConfig:
        for name in ("debate_conform", "overcorrect"):
            table = getattr(self.generic, name)
            missing = set(self.tiers) - set(table)
            if missing:
                raise ValueError(f"generic.{name} has no value for tier(s) {', '.join(sorted(missing))}")
        return self

    def tier(self, name: str) -> TierConfig:
        return self.tiers[name]
