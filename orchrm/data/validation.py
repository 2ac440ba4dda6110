"""Data-quality gates: the Great Expectations suites in ``expectations/`` run on both tables.

``validate_artifacts(df)`` and ``validate_pairs(df)`` run ``expectations/artifacts.json`` and
``expectations/pairs.json`` (GX Core 1.x, an ephemeral context, a pandas data source) and return a
:class:`ValidationReport`. When a *critical* expectation fails they raise
:class:`~orchrm.errors.DataQualityError` listing every failed expectation by name, with its intent
note and a few offending rows; *warning* expectations are reported, never raised. Either way the
GX validation results (JSON) and Data Docs (HTML) are written to the run's folder
(default ``.orchrm/validation/<UTC timestamp>``) before anything is raised: ``<suite>.results.json``
(GX's ``ExpectationSuiteValidationResult``), ``summary.json`` (the outcomes below) and
``data_docs/index.html``.

Cross-row checks GX has no pandas expectation for (a task in two splits, a pair crossing tasks, a
self-pair, the length-bias rate) run on columns derived here before validation, prefixed ``dq_``
and documented in each suite's ``meta.derived_columns``; the expectation's note says which. (GX's
``UnexpectedRowsExpectation`` runs only on SQL and Spark sources in 1.24, and its pandas
``expect_select_column_values_to_be_unique_within_record`` takes ~10 s per 100k rows.)

GX is imported lazily (it takes seconds), its analytics are off, and validations run one at a
time under a lock (GX is not thread-safe, GX#12209). A suite loaded from JSON is checked to hold
every expectation of the file: GX drops an invalid one with only a log line.

>>> report = validate_pairs(pairs, out_dir="runs/validation")  # doctest: +SKIP
>>> print(report)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orchrm.errors import ConfigError, DataQualityError

logger = logging.getLogger(__name__)

#: suite key -> file name under the expectations folder
SUITE_FILES: Mapping[str, str] = {"artifacts": "artifacts.json", "pairs": "pairs.json"}
#: id columns shown for an offending row when an expectation names none
ID_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "artifacts": ("artifact_id", "task_id", "plan_id", "node_id"),
    "pairs": ("pair_id", "task_id", "split"),
}
MAX_EXAMPLES = 5

_GX_LOCK = threading.Lock()  # GX is not thread-safe (GX#12209): one validation at a time


# where the suites live --------------------------------------------------------------------------
def expectations_dir() -> Path:
    """The folder holding the suites: ``$ORCHRM_EXPECTATIONS_DIR``, else ``expectations/`` beside
    the ``orchrm`` package (a source checkout), else ``<prefix>/share/orchrm/expectations`` (a
    wheel install), else ``./expectations``."""
    env = os.environ.get("ORCHRM_EXPECTATIONS_DIR")
    candidates = [Path(env)] if env else []
    candidates += [
        Path(__file__).resolve().parents[2] / "expectations",
        Path(sys.prefix) / "share" / "orchrm" / "expectations",
        Path.cwd() / "expectations",
    ]
    for c in candidates:
        if (c / SUITE_FILES["pairs"]).exists():
            return c
    raise ConfigError(
        "cannot find the expectation suites (expectations/pairs.json); set ORCHRM_EXPECTATIONS_DIR "
        f"to the folder that holds them (looked in: {', '.join(map(str, candidates))})"
    )


def suite_path(suite: str) -> Path:
    """Path of suite ``artifacts`` or ``pairs`` (or of any JSON file given as a path)."""
    if suite in SUITE_FILES:
        return expectations_dir() / SUITE_FILES[suite]
    return Path(suite)


def read_suite_file(suite: str) -> dict:
    """The suite's JSON as a dict; every expectation must carry ``meta.name`` and ``notes``."""
    path = suite_path(suite)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"expectation suite {path} not found") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from None
    exps = data.get("expectations")
    if not isinstance(data.get("name"), str) or not isinstance(exps, list) or not exps:
        raise ConfigError(f"{path}: a suite needs a 'name' and a non-empty 'expectations' list")
    names = []
    for i, exp in enumerate(exps):
        name = (exp.get("meta") or {}).get("name") if isinstance(exp, dict) else None
        if not name or not exp.get("notes"):
            raise ConfigError(f"{path}: expectation #{i} needs meta.name and an intent note in 'notes'")
        names.append(name)
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"{path}: expectation names must be unique; repeated: {', '.join(dup)}")
    return data


def load_suite(suite: str, names: Sequence[str] | None = None) -> Any:
    """A ``gx.ExpectationSuite`` built from the JSON file (only the expectations in ``names`` when
    given), checked to hold *every* expectation asked for (GX drops invalid ones with only a log
    line); raises :class:`ConfigError` naming the dropped expectations and why GX refused them."""
    gx = _gx()
    data = read_suite_file(suite)
    if names is not None:
        unknown = sorted(set(names) - {e["meta"]["name"] for e in data["expectations"]})
        if unknown:
            raise KeyError(f"{suite_path(suite)} has no expectation named {', '.join(unknown)}")
        data = {**data, "expectations": [e for e in data["expectations"] if e["meta"]["name"] in set(names)]}
    gx_logger = logging.getLogger("great_expectations.core.expectation_suite")
    previous = gx_logger.level
    gx_logger.setLevel(logging.CRITICAL)  # the drop is reported below, with the reason
    try:
        loaded = gx.ExpectationSuite(**json.loads(json.dumps(data)))
    finally:
        gx_logger.setLevel(previous)
    if len(loaded.expectations) != len(data["expectations"]):
        kept = {(e.meta or {}).get("name") for e in loaded.expectations}
        lost = []
        for exp in data["expectations"]:
            if exp["meta"]["name"] in kept:
                continue
            try:
                gx.ExpectationSuite(name="probe", expectations=[]).add_expectation_configuration(
                    _expectation_configuration(exp)
                )
                reason = "dropped by GX"
            except Exception as exc:  # GX raises several types for a bad configuration
                reason = str(exc).splitlines()[0]
            lost.append(f"{exp['meta']['name']} ({exp.get('type')}): {reason}")
        raise ConfigError(
            f"{suite_path(suite)}: Great Expectations loaded {len(loaded.expectations)} of "
            f"{len(data['expectations'])} expectations; fix or remove: " + "; ".join(lost)
        )
    return loaded


def _expectation_configuration(exp: dict) -> Any:
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    return ExpectationConfiguration(**exp)


def _gx() -> Any:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx

    return gx


# derived columns ----------------------------------------------------------------------------------
def _hashable(values: pd.Series) -> pd.Series:
    """``values`` with unhashable cells (a list, a dict: never valid in these columns) as their
    text, so that grouping on them works and the suite's type and value checks name the rows."""
    if values.dtype != object:
        return values
    unhashable = values.map(lambda v: isinstance(v, list | dict | set | np.ndarray))
    return values.where(~unhashable, values[unhashable].map(repr)) if unhashable.any() else values


def derive_artifact_columns(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` plus the ``dq_`` columns the artifact suite checks (see its ``meta.derived_columns``);
    a column whose inputs are missing is left out (its expectation then reports the missing column)."""
    out = df.reset_index(drop=True)
    key = {c: _hashable(out[c]) for c in ("task_id", "question", "run_id", "plan_id") if c in out.columns}
    if {"task_id", "question"} <= set(out.columns):
        out["dq_task_question_count"] = key["question"].groupby(key["task_id"], dropna=False).transform("nunique")
    if {"run_id", "task_id", "plan_id", "is_final"} <= set(out.columns):
        finals = pd.to_numeric(out["is_final"], errors="coerce").fillna(0).astype("int64")
        keys = [key["run_id"], key["task_id"], key["plan_id"]]
        out["dq_finals_per_execution"] = finals.groupby(keys, dropna=False).transform("sum")
    out["dq_parse_failed"] = _parse_flags(out)
    if "answer" in out.columns:
        out["dq_parse_failed_with_answer"] = ((out["dq_parse_failed"] == 1) & out["answer"].notna()).astype("int64")
    return out


def _parse_flags(df: pd.DataFrame) -> pd.Series:
    """``parse_failed`` as 1 / 0, -1 where a cell is not a boolean; 0 throughout for a table written
    before the column existed (its default, :data:`orchrm.data.tables.ARTIFACT_DEFAULTS`)."""
    from orchrm.data.tables import non_boolean_rows

    if "parse_failed" not in df.columns:
        return pd.Series(0, index=df.index, dtype="int64")
    flags = pd.Series(-1, index=df.index, dtype="int64")
    ok = df.index.difference(non_boolean_rows(df["parse_failed"]))
    flags[ok] = df.loc[ok, "parse_failed"].astype(bool).astype("int64")
    return flags


def derive_pair_columns(df: pd.DataFrame, artifacts: pd.DataFrame | None = None) -> pd.DataFrame:
    """``df`` plus the ``dq_`` columns the pair suite checks (see its ``meta.derived_columns``).

    ``dq_artifact_task_count`` ties each artifact id to the task_ids it appears with in this
    table and, when ``artifacts`` is given, in the artifact table: a pair whose two artifacts
    belong to different tasks shows up as an artifact tied to two tasks.
    """
    out = df.reset_index(drop=True)
    cols = set(out.columns)
    key = {c: _hashable(out[c]) for c in ("task_id", "split", "chosen_artifact_id", "rejected_artifact_id") if c in cols}
    if {"task_id", "split"} <= cols:
        out["dq_task_split_count"] = key["split"].groupby(key["task_id"], dropna=False).transform("nunique")
    if {"task_id", "chosen_artifact_id", "rejected_artifact_id"} <= cols:
        links = [
            pd.DataFrame({"artifact_id": key["chosen_artifact_id"], "task_id": key["task_id"]}),
            pd.DataFrame({"artifact_id": key["rejected_artifact_id"], "task_id": key["task_id"]}),
        ]
        if artifacts is not None and {"artifact_id", "task_id"} <= set(artifacts.columns):
            links.append(pd.DataFrame({"artifact_id": _hashable(artifacts["artifact_id"]), "task_id": _hashable(artifacts["task_id"])}))
        tied = pd.concat(links, ignore_index=True).dropna().drop_duplicates().groupby("artifact_id")["task_id"].size()
        count = np.maximum(
            key["chosen_artifact_id"].map(tied).fillna(1).to_numpy(dtype=np.int64),
            key["rejected_artifact_id"].map(tied).fillna(1).to_numpy(dtype=np.int64),
        )
        out["dq_artifact_task_count"] = count
    if {"chosen", "rejected"} <= cols:
        same = (_hashable(out["chosen"]) == _hashable(out["rejected"])).fillna(False).to_numpy(dtype=bool)
        if {"chosen_artifact_id", "rejected_artifact_id"} <= cols:
            same = same | (key["chosen_artifact_id"] == key["rejected_artifact_id"]).fillna(False).to_numpy(dtype=bool)
        out["dq_self_pair"] = same.astype(np.int64)
        diff = np.sign(_lengths(out["chosen"]) - _lengths(out["rejected"]))
        out["dq_longer_wins"] = (diff + 1.0) / 2.0
    return out


def _lengths(texts: pd.Series) -> np.ndarray:
    """Characters per cell (0 for a missing or non-text cell)."""
    if texts.dtype == object:
        return texts.map(lambda v: len(v) if isinstance(v, str) else 0).to_numpy(dtype=np.float64)
    if pd.api.types.is_string_dtype(texts):
        return texts.str.len().fillna(0).to_numpy(dtype=np.float64)
    return np.zeros(len(texts))


# results ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ExpectationOutcome:
    """The verdict of one expectation on one table.

    ``examples``: up to five offending rows (row number plus the id columns and the checked
    column); ``observed``: GX's observed value for table-level expectations; ``error``: set when
    the expectation could not run (e.g. its column is missing).
    """

    suite: str
    name: str
    expectation_type: str
    severity: str
    success: bool
    note: str
    column: str | None = None
    unexpected_count: int | None = None
    observed: Any = None
    examples: tuple[dict, ...] = ()
    error: str | None = None

    @property
    def critical(self) -> bool:
        return self.severity == "critical"

    def describe(self) -> str:
        """Multi-line text: name, type, column, the intent note, then what went wrong."""
        where = f" on {self.column}" if self.column else ""
        lines = [f"{self.suite}.{self.name} [{self.severity}] ({self.expectation_type}{where})", f"    why: {self.note}"]
        if self.error:
            lines.append(f"    could not run: {self.error}")
        if self.unexpected_count:
            lines.append(f"    {self.unexpected_count} offending row(s)" + (", e.g.:" if self.examples else ""))
        elif self.observed is not None:
            lines.append(f"    observed: {_short(self.observed, 300)}")
        lines += [f"      {_short(row, 300)}" for row in self.examples]
        return "\n".join(lines)


@dataclass(frozen=True)
class ValidationReport:
    """Outcomes of one or more suites; where their results and Data Docs were written.

    ``success`` is False when any *critical* expectation failed; :meth:`raise_for_failures`
    raises :class:`DataQualityError` then. ``files`` maps ``<suite>.results`` / ``summary`` /
    ``data_docs`` to paths.
    """

    outcomes: tuple[ExpectationOutcome, ...]
    rows: Mapping[str, int] = field(default_factory=dict)
    out_dir: Path | None = None
    files: Mapping[str, Path] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return not self.failures

    @property
    def failures(self) -> tuple[ExpectationOutcome, ...]:
        return tuple(o for o in self.outcomes if not o.success and o.critical)

    @property
    def warnings(self) -> tuple[ExpectationOutcome, ...]:
        return tuple(o for o in self.outcomes if not o.success and not o.critical)

    def outcome(self, name: str, suite: str | None = None) -> ExpectationOutcome:
        """The outcome of expectation ``name`` (``suite.name`` or the bare name)."""
        for o in self.outcomes:
            if (suite is None or o.suite == suite) and (o.name == name or f"{o.suite}.{o.name}" == name):
                return o
        raise KeyError(name)

    def merge(self, other: ValidationReport) -> ValidationReport:
        return ValidationReport(
            self.outcomes + other.outcomes,
            {**self.rows, **other.rows},
            other.out_dir or self.out_dir,
            {**self.files, **other.files},
        )

    def error_message(self) -> str:
        fails = self.failures
        head = f"data-quality gate failed: {len(fails)} critical expectation(s) failed"
        tables = ", ".join(f"{k} ({v} rows)" for k, v in self.rows.items())
        lines = [f"{head} on {tables}:"] + [o.describe() for o in fails]
        if self.warnings:
            lines.append(f"also {len(self.warnings)} warning(s): {', '.join(f'{o.suite}.{o.name}' for o in self.warnings)}")
        if self.out_dir is not None:
            lines.append(f"GX results and Data Docs: {self.out_dir}")
        return "\n".join(lines)

    def raise_for_failures(self) -> None:
        if not self.success:
            raise DataQualityError(self.error_message())

    def __str__(self) -> str:
        lines = []
        for suite, n in self.rows.items():
            mine = [o for o in self.outcomes if o.suite == suite]
            passed = sum(o.success for o in mine)
            verdict = "FAILED" if any(not o.success and o.critical for o in mine) else "passed"
            lines.append(f"{suite}: {verdict} - {passed}/{len(mine)} expectations met on {n} rows")
            for o in mine:
                if not o.success:
                    lines.append("  " + o.describe().replace("\n", "\n  "))
        if self.files.get("data_docs"):
            lines.append(f"Data Docs: {self.files['data_docs']}")
        if self.out_dir is not None:
            lines.append(f"results: {self.out_dir}")
        return "\n".join(lines)


def _short(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _cell(value: Any) -> Any:
    if isinstance(value, str):
        return value if len(value) <= 60 else value[:57] + "..."
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and np.isnan(value):
        return None
    return value if isinstance(value, str | int | float | bool | type(None)) else str(value)


# running GX -------------------------------------------------------------------------------------
def default_out_dir() -> Path:
    """``.orchrm/validation/<UTC timestamp>`` under the current directory."""
    return Path(".orchrm") / "validation" / datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


class _Session:
    """One ephemeral GX context whose Data Docs site lives in ``out_dir/data_docs``."""

    def __init__(self, out_dir: Path | None) -> None:
        gx = _gx()  # first: it turns GX's analytics off before GX is imported
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.gx = gx
        self.out_dir = out_dir
        self.context = gx.get_context(mode="ephemeral")
        self.context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        for site in list(self.context.list_data_docs_sites()):
            self.context.delete_data_docs_site(site)  # only ours; no stray temp folders
        self.source = self.context.data_sources.add_pandas("orchrm")
        if out_dir is None:
            return
        self.docs = (out_dir / "data_docs").resolve()
        self.context.add_data_docs_site(
            "orchrm",
            {
                "class_name": "SiteBuilder",
                "show_how_to_buttons": False,
                "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(self.docs)},
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            },
        )

    def run_in_memory(self, suite_key: str, df: pd.DataFrame, names: Sequence[str] | None) -> list[ExpectationOutcome]:
        """Validate without a checkpoint: no files, no Data Docs."""
        gx = self.gx
        suite = load_suite(suite_key, names)
        suite.name = f"{suite.name}.{len(self.context.suites.all())}"
        suite = self.context.suites.add(suite)
        asset = self.source.add_dataframe_asset(suite.name)
        batch = asset.add_batch_definition_whole_dataframe("table")
        result = gx.ValidationDefinition(name=suite.name, data=batch, suite=suite).run(
            batch_parameters={"dataframe": df},
            result_format={"result_format": "SUMMARY", "partial_unexpected_count": MAX_EXAMPLES},
        )
        return _outcomes(suite_key, read_suite_file(suite_key), result, df)

    def run(self, suite_key: str, df: pd.DataFrame) -> tuple[list[ExpectationOutcome], Path]:
        """Validate through a Checkpoint (the result is stored for Data Docs) and write the GX
        result JSON; :meth:`build_docs` renders the site once all tables are in."""
        gx = self.gx
        spec = read_suite_file(suite_key)
        suite = self.context.suites.add(load_suite(suite_key))
        asset = self.source.add_dataframe_asset(suite_key)
        batch = asset.add_batch_definition_whole_dataframe(f"{suite_key}-table")
        definition = self.context.validation_definitions.add(gx.ValidationDefinition(name=suite_key, data=batch, suite=suite))
        checkpoint = self.context.checkpoints.add(
            gx.Checkpoint(
                name=f"orchrm-{suite_key}",
                validation_definitions=[definition],
                actions=[],
                result_format={"result_format": "SUMMARY", "partial_unexpected_count": MAX_EXAMPLES},
            )
        )
        result = checkpoint.run(batch_parameters={"dataframe": df})
        (suite_result,) = result.run_results.values()
        results_path = self.out_dir / f"{suite_key}.results.json"
        payload = json.dumps(suite_result.to_json_dict(), indent=1, default=str)
        results_path.write_text(payload, encoding="utf-8")
        return _outcomes(suite_key, spec, suite_result, df), results_path

    def build_docs(self) -> Path | None:
        """Render the Data Docs site (every validation of this session); its index page."""
        self.context.build_data_docs(site_names=["orchrm"])
        index = self.docs / "index.html"
        return index if index.exists() else None


def _outcomes(suite_key: str, spec: dict, suite_result: Any, df: pd.DataFrame) -> list[ExpectationOutcome]:
    by_name = {e["meta"]["name"]: e for e in spec["expectations"]}
    outcomes = []
    for r in suite_result.results:
        cfg = r.expectation_config
        name = (cfg.meta or {}).get("name", cfg.type)
        exp = by_name.get(name, {})
        kwargs = cfg.kwargs
        column = kwargs.get("column") or (", ".join(kwargs["column_list"]) if kwargs.get("column_list") else None)
        res = r.result or {}
        info = r.exception_info or {}
        if "raised_exception" not in info and info:  # keyed by metric id when a metric failed
            info = next(iter(info.values()))
        error = info.get("exception_message") if info.get("raised_exception") else None
        indices = res.get("partial_unexpected_index_list") or []
        show = list((exp.get("meta") or {}).get("show") or ID_COLUMNS[suite_key])
        if kwargs.get("column") and kwargs["column"] not in show:
            show.append(kwargs["column"])
        show = [c for c in show if c in df.columns]
        examples = tuple(
            {"row": int(i), **{c: _cell(df[c].iat[int(i)]) for c in show}}
            for i in indices[:MAX_EXAMPLES]
            if isinstance(i, int | np.integer) and 0 <= int(i) < len(df)
        )
        mismatched = (res.get("details") or {}).get("mismatched") or {}
        # extra columns are allowed (and the dq_ ones are ours): the missing ones are the news
        observed = {"missing": mismatched["missing"]} if mismatched.get("missing") else res.get("observed_value")
        outcomes.append(
            ExpectationOutcome(
                suite=suite_key,
                name=name,
                expectation_type=cfg.type,
                severity=str(getattr(cfg.severity, "value", cfg.severity)),
                success=bool(r.success),
                note=str(exp.get("notes") or cfg.notes or ""),
                column=column,
                unexpected_count=res.get("unexpected_count"),
                observed=_cell(observed) if isinstance(observed, np.generic | float) else observed,
                examples=examples,
                error=error,
            )
        )
    order = {name: i for i, name in enumerate(by_name)}
    return sorted(outcomes, key=lambda o: order.get(o.name, len(order)))  # the file's order


def _validate(tables: Sequence[tuple[str, pd.DataFrame]], out_dir: str | os.PathLike | None) -> ValidationReport:
    target = Path(out_dir) if out_dir is not None else default_out_dir()
    target.mkdir(parents=True, exist_ok=True)
    outcomes: list[ExpectationOutcome] = []
    files: dict[str, Path] = {}
    rows: dict[str, int] = {}
    with _GX_LOCK:
        session = _Session(target)
        for suite_key, frame in tables:
            found, path = session.run(suite_key, frame)
            outcomes += found
            files[f"{suite_key}.results"] = path
            rows[suite_key] = len(frame)
        index = session.build_docs()
        if index is not None:
            files["data_docs"] = index
    report = ValidationReport(tuple(outcomes), rows, target, files)
    summary = {
        "success": report.success,
        "rows": rows,
        "failures": [f"{o.suite}.{o.name}" for o in report.failures],
        "warnings": [f"{o.suite}.{o.name}" for o in report.warnings],
        "outcomes": [o.__dict__ for o in report.outcomes],
    }
    files["summary"] = target / "summary.json"
    files["summary"].write_text(json.dumps(summary, indent=1, default=str), encoding="utf-8")
    logger.info("validation %s: %d failure(s), %d warning(s); results in %s", "passed" if report.success else "FAILED", len(report.failures), len(report.warnings), target)
    return report


def _finish(report: ValidationReport, raise_on_failure: bool) -> ValidationReport:
    if raise_on_failure:
        report.raise_for_failures()
    return report


# public verbs -------------------------------------------------------------------------------------
def run_expectations(
    suite: str, df: pd.DataFrame, names: Sequence[str] | None = None, *, artifacts: pd.DataFrame | None = None
) -> list[ExpectationOutcome]:
    """Run some (default: all) expectations of suite ``artifacts`` or ``pairs`` on ``df`` in
    memory, derived ``dq_`` columns included (``artifacts``: as for :func:`validate_pairs`): no
    files, no Data Docs, nothing raised. For debugging one expectation, and for tests that show
    each expectation firing on its own."""
    frame = derive_artifact_columns(df) if suite == "artifacts" else derive_pair_columns(df, artifacts)
    with _GX_LOCK:
        return _Session(None).run_in_memory(suite, frame, names)



def validate_artifacts(
    df: pd.DataFrame, *, out_dir: str | os.PathLike | None = None, raise_on_failure: bool = True
) -> ValidationReport:
    """Run ``expectations/artifacts.json`` on an artifact table; raise :class:`DataQualityError`
    when a critical expectation fails (unless ``raise_on_failure=False``). Results and Data Docs
    are written to ``out_dir`` first."""
    return _finish(_validate([("artifacts", derive_artifact_columns(df))], out_dir), raise_on_failure)


def validate_pairs(
    df: pd.DataFrame,
    *,
    artifacts: pd.DataFrame | None = None,
    out_dir: str | os.PathLike | None = None,
    raise_on_failure: bool = True,
) -> ValidationReport:
    """Run ``expectations/pairs.json`` on a pair table; ``artifacts`` (optional) lets
    ``pair_within_one_task`` check each artifact's task against the artifact table. Raises
    :class:`DataQualityError` when a critical expectation fails (unless ``raise_on_failure=False``)."""
    return _finish(_validate([("pairs", derive_pair_columns(df, artifacts))], out_dir), raise_on_failure)


def _refuse_raw_traces(path: str | os.PathLike, df: pd.DataFrame) -> None:
    """A file of a system's own traces (the ingest columns, few of the artifact table's) is not an
    artifact table yet: say so instead of failing most of the suite."""
    from orchrm.data.ingest import INGEST_REQUIRED
    from orchrm.data.tables import ARTIFACT_COLUMNS
    from orchrm.errors import TraceSchemaError

    missing = [c for c in ARTIFACT_COLUMNS if c not in df.columns]
    if len(missing) > len(ARTIFACT_COLUMNS) // 2 and set(INGEST_REQUIRED) <= set(df.columns):
        raise TraceSchemaError(
            f"{path} looks like raw traces, not an artifact table (it lacks {', '.join(missing[:6])}"
            f"{', ...' if len(missing) > 6 else ''}): normalise it first with `orchrm ingest --traces {path} "
            "--out artifacts.parquet`, then validate that"
        )


def validate_files(
    artifacts: str | os.PathLike | None = None,
    pairs: str | os.PathLike | None = None,
    out_dir: str | os.PathLike | None = None,
    *,
    raise_on_failure: bool = True,
) -> ValidationReport:
    """Validate an artifact table and/or a pair table from files (Parquet or JSONL), one after the
    other into one results folder; used by ``orchrm validate``. A pair file (ours, TRL's or the
    OrchRM data set's format) is read with :func:`orchrm.data.pair_reader.read_pairs`, as training reads
    it. Given both, pairs are checked against the artifacts' tasks too."""
    from orchrm.data.tables import read_table

    if artifacts is None and pairs is None:
        raise ValueError("give artifacts and/or pairs")
    tables: list[tuple[str, pd.DataFrame]] = []
    artifact_df = None
    if artifacts is not None:
        artifact_df = read_table(artifacts)
        _refuse_raw_traces(artifacts, artifact_df)
        tables.append(("artifacts", derive_artifact_columns(artifact_df)))
    if pairs is not None:
        from orchrm.data.pair_reader import read_pairs

        pair_df = read_pairs(pairs)  # as training reads it: the same tasks, splits and margins
        tables.append(("pairs", derive_pair_columns(pair_df, artifact_df)))
    return _finish(_validate(tables, out_dir), raise_on_failure)
