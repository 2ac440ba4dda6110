"""Errors that name the problem and the fix. Every public failure in OrchRM is one of these."""

from __future__ import annotations


class OrchRMError(Exception):
    """Base class: catch this to handle any OrchRM failure."""


class PlanError(OrchRMError, ValueError):
    """A plan text or Plan object is invalid; the message names the node and the fix."""


class ConfigError(OrchRMError, ValueError):
    """A configuration file or value is invalid; the message names the field."""


class TaskError(OrchRMError, ValueError):
    """A task suite cannot be loaded or a task is malformed."""


class TraceSchemaError(OrchRMError, ValueError):
    """External traces or an artifact table break the schema (DESIGN §3); names rows and columns."""


class CollectionError(OrchRMError, RuntimeError):
    """Collection could not finish (a worker process died); names the likely cause and the fix."""


class DataQualityError(OrchRMError):
    """A Great Expectations gate failed; lists every failed expectation with offending rows."""


class ModelFileError(OrchRMError, ValueError):
    """A saved reward model is missing, truncated, foreign or corrupt."""


class TrainingError(OrchRMError, RuntimeError):
    """Training cannot continue (for example a NaN loss); the last good checkpoint is kept."""


class OutputPathError(OrchRMError, ValueError):
    """An output cannot be written where it was asked for (a file where a folder must be, no
    permission, the command's own input); names the path and the fix."""


class SandboxUnavailableError(OrchRMError, RuntimeError):
    """The code sandbox itself failed (its worker could not start, or could not run a job), so
    no program ran: its quality is not 0 but unmeasured. Stops the collection rather than
    scoring every program 0.0, which would turn into wrong chosen-over-rejected pairs."""


class PromotionRejected(OrchRMError):
    """A candidate failed a gate, so it cannot become ``champion``; names every failed gate."""


class RegistryError(OrchRMError, RuntimeError):
    """The model registry cannot answer (unreachable tracking server, missing alias or version,
    files gone or corrupt); says what to do."""


class BackendError(OrchRMError, RuntimeError):
    """An LLM backend could not answer: a model file that is missing or unreadable, a server that
    is unreachable, times out, keeps refusing (429, 5xx) or replies with something malformed.
    The message names the backend setting or the server to check."""
