"""What the pipeline writes where a reviewer reads it in MLflow: the report fitted into MLflow's
limits on a description, and the config logged with its credentials masked."""

from __future__ import annotations

from orchrm.config import PipelineConfig
from orchrm.ops.pipeline import fit_markdown
from orchrm.ops.tracking import as_params, redacted

REPORT = "\n".join([
    "# OrchRM pipeline: promoted", "", "version 3 passed every gate", "",
    "## Gates", "", "| gate | value | threshold |", "|---|---|---|", "| pairwise_accuracy | 0.7 | 0.6 |", "",
    "## Best-of-N: all", "", "| selector | N = 8 |", *[f"| s{i} | 0.5 |" for i in range(40)], "",
    *[line for d in ("code", "math", "multihop", "webqa") for line in (f"## Best-of-N: {d}", "", *[f"| s{i} | 0.4 |" for i in range(40)], "")],
    "## Gap closed at N = 8", "", "| domain | gap |", "| all | 0.6 |", "",
])


def test_a_report_that_fits_is_left_as_it_is():
    assert fit_markdown(REPORT, len(REPORT), full="see report.md") == REPORT


def test_a_long_report_loses_the_per_domain_tables_first_and_says_where_the_whole_is():
    text = fit_markdown(REPORT, 1200, full="the full report is the artifact `report.md`")
    assert len(text) <= 1200
    assert text.startswith("# OrchRM pipeline: promoted") and "| pairwise_accuracy | 0.7 | 0.6 |" in text
    assert "## Best-of-N: all" in text and "## Gap closed at N = 8" in text
    assert "## Best-of-N: math" not in text
    assert text.endswith("_Left out here: Best-of-N: code, Best-of-N: math, Best-of-N: multihop, Best-of-N: webqa; "
                         "the full report is the artifact `report.md`._")


def test_a_tiny_limit_still_keeps_the_verdict_within_it():
    text = fit_markdown(REPORT, 120, full="see report.md")
    assert len(text) <= 120 and text.startswith("# OrchRM pipeline: promoted") and "see report.md" in text


def test_credentials_never_reach_the_logged_config():
    values = redacted({"registry": {"tracking_uri": "https://bot:s3cret@mlflow.example"}, "backend": {"api_key": "sk-1", "max_tokens": 64}})
    assert values == {"registry": {"tracking_uri": "https://***@mlflow.example"}, "backend": {"api_key": "***", "max_tokens": 64}}


def test_every_section_of_the_config_becomes_a_parameter():
    params = {p.key: p.value for p in as_params(redacted(PipelineConfig().model_dump(mode="json")))}
    sections = {key.split(".")[0] for key in params}
    assert {"collect", "pairs", "model", "train", "evaluate", "registry", "pipeline"} <= sections
    assert params["evaluate.gates.min_pairwise_accuracy"] == str(PipelineConfig().evaluate.gates.min_pairwise_accuracy)
