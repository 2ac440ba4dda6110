"""`orchrm ingest`: a user's own traces become an artifact table, or nothing is written."""

import json
import os

import numpy as np
import pandas as pd
import pytest

from orchrm.cli import main
from orchrm.data.ingest import ingest_traces
from orchrm.data.tables import ARTIFACT_COLUMNS, read_table, write_table
from orchrm.errors import OutputPathError, TraceSchemaError


def _traces() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "task_id": ["t1", "t1", "t1", "t2"],
            "question": ["What is 6 * 7?"] * 3 + ["Capital of France?"],
            "plan_id": ["p1", "p1", "p2", "p3"],
            "node_id": ["parse", "solve", "solve", "answer"],
            "agent": ["parser", "solver", "solver", "reader"],
            "content": ["six times seven", "6 * 7 = 42. Answer: 42", "6 * 7 = 36. Answer: 36", "It is Paris."],
            "answer": [None, "42", "36", "Paris"],
            "reference": ["42", "42", "42", "Paris"],
            "domain": ["math", "math", "math", "webqa"],
        }
    )


def test_minimal_traces_are_normalised_into_every_artifact_column():
    out = ingest_traces(_traces())
    assert list(out.columns) == list(ARTIFACT_COLUMNS)
    assert out.artifact_id.is_unique
    assert out.quality.tolist()[1:] == [1.0, 0.0, 1.0]
    assert np.isnan(out.quality.iloc[0])  # no answer: quality unknown, not zero
    assert out.groupby(["task_id", "plan_id"]).is_final.sum().eq(1).all()
    assert (out.prompt_tokens > 0).all() and (out.completion_tokens > 0).all()
    assert out.plan_text.iloc[0] == "parse: parser\nsolve: solver"


def test_given_quality_and_tokens_are_kept():
    df = _traces().drop(columns=["answer", "reference"]).assign(quality=[0.5, 1.0, 0.0, 1.0], prompt_tokens=10, completion_tokens=3)
    out = ingest_traces(df)
    assert out.quality.tolist() == [0.5, 1.0, 0.0, 1.0]
    assert (out.prompt_tokens == 10).all() and (out.cost == 13.0).all()


def test_orchrm_plan_text_is_parsed_and_canonicalised():
    df = _traces().assign(plan_text="<agent model='small' type='CoT' id='a1'/>", node_id="a1")
    out = ingest_traces(df)
    assert set(out.plan_text) == {'<agent id="a1" type="CoT" model="small"/>'}


def test_rows_of_an_agent_plan_name_one_of_its_agents():
    plan = '<agent id="a1" type="CoT" model="small"/>\n<agent id="a2" type="Reflexion" model="small" iterations="1"/>\n<edge from="a1" to="a2"/>'
    # without node ids, each row is the plan's last agent's output
    out = ingest_traces(_traces().drop(columns=["node_id", "agent"]).assign(plan_text=plan))
    assert set(out.node_id) == {"a2"} and set(out.agent) == {"Reflexion"}
    with pytest.raises(TraceSchemaError, match=r"column 'node_id': rows 0, 1, 2, 3 have an <agent"):
        ingest_traces(_traces().assign(plan_text=plan))  # node ids of another plan (parse, solve, ...)


def test_rows_of_an_agent_plan_take_their_nodes_type_depth_and_parents_from_it():
    plan = '<agent id="a1" type="WebSearch" queries="2" top_k="5"/>\n<agent id="a2" type="CoT" model="small"/>\n<edge from="a1" to="a2"/>'
    traces = pd.DataFrame({
        "task_id": ["t1", "t1"], "question": ["Capital of France?"] * 2, "plan_text": [plan, plan], "node_id": ["a1", "a2"],
        "content": ["Paris is the capital of France.", "Answer: Paris"], "quality": [0.5, 1.0],
    })
    out = ingest_traces(traces)
    assert out["agent"].tolist() == ["WebSearch", "CoT"] and out["depth"].tolist() == [0, 1]
    assert [list(p) for p in out["parent_ids"]] == [[], ["a1"]] and out["is_final"].tolist() == [False, True]
    given = ingest_traces(traces.assign(agent=["searcher", None], depth=[0, 5]))  # what the trace says wins
    assert given["agent"].tolist() == ["searcher", "CoT"] and given["depth"].tolist() == [0, 5]


MAS_PLAN = """<thinking>Look the fact up, then answer from it.</thinking>
<agent>
  <agent_id>WS</agent_id>
  <agent_name>WebSearchAgent</agent_name>
  <agent_description>Find the capital.</agent_description>
  <required_arguments>
    <agent_input>capital of France</agent_input>
    <queries>1</queries>
    <top_k>3</top_k>
  </required_arguments>
</agent>
<agent>
  <agent_id>ANSWER</agent_id>
  <agent_name>SCAgent</agent_name>
  <agent_description>Answer from the snippets.</agent_description>
  <required_arguments>
    <agent_input>Snippets: ${WS}</agent_input>
    <k>3</k>
  </required_arguments>
</agent>
<edge>
  <from>WS</from><to>ANSWER</to>
</edge>"""


def test_a_trace_file_of_mas_orchestra_plans_ingests_into_structured_plans(tmp_path):
    traces, out = tmp_path / "mas.jsonl", tmp_path / "artifacts.parquet"
    pd.DataFrame({
        "task_id": ["t1", "t1"], "question": ["Capital of France?"] * 2, "plan_text": [MAS_PLAN] * 2, "node_id": ["WS", "ANSWER"],
        "content": ["Paris is the capital of France.", "Answer: Paris"], "answer": [None, "Paris"], "reference": ["Paris"] * 2,
    }).to_json(traces, orient="records", lines=True)
    assert main(["ingest", "--traces", str(traces), "--out", str(out)]) == 0
    artifacts = read_table(out)
    assert set(artifacts.plan_text) == {
        '<agent id="WS" type="WebSearch" queries="1" top_k="3"/>\n<agent id="ANSWER" type="SelfConsistency" model="small" k="3"/>\n'
        '<edge from="WS" to="ANSWER"/>'
    }
    assert artifacts.agent.tolist() == ["WebSearch", "SelfConsistency"] and artifacts.depth.tolist() == [0, 1]
    assert [list(p) for p in artifacts.parent_ids] == [[], ["WS"]] and artifacts.is_final.tolist() == [False, True]
    assert artifacts.quality.iloc[1] == 1.0


def test_an_invalid_mas_orchestra_plan_is_refused_saying_why():
    bad = MAS_PLAN.replace("SCAgent", "PlannerAgent")
    traces = _traces().drop(columns=["node_id", "agent"]).assign(plan_text=bad)
    with pytest.raises(TraceSchemaError, match=r"column 'plan_text': .* in rows 0, 1, 2, 3; the first: <agent> block 2 \('ANSWER'\): unknown agent_name 'PlannerAgent'"):
        ingest_traces(traces)


DESK_PLAN = (
    '<agent id="a1" type="WebSearch" queries="2" top_k="5" role="kb_search"/>\n'
    '<agent id="a2" type="CoT" model="small" role="kb_reply"/>\n<edge from="a1" to="a2"/>'
)


def _desk_traces() -> pd.DataFrame:
    """A support desk's traces: the plan's two agents, then a reply written by a step outside the
    plan (node_id "final", agent "Resolver") that is the execution's final output."""
    rows = []
    for ticket, (plan, resolved) in enumerate([(DESK_PLAN, 1.0), ('<agent id="a1" type="CoT" model="large" role="refund_desk"/>', 0.0)] * 2):
        task = f"ticket-{ticket // 2}"
        question = f"Ticket {ticket // 2}: I was charged twice for my subscription this month."
        for node in ("a1", "a2") if plan == DESK_PLAN else ("a1",):
            rows.append({"task_id": task, "question": question, "plan_text": plan, "node_id": node,
                         "content": f"{node} notes", "quality": 0.5, "is_final": False})
        rows.append({"task_id": task, "question": question, "plan_text": plan, "node_id": "final", "agent": "Resolver",
                     "content": "Refunded, sorry for the trouble." if resolved else "Please wait.", "quality": resolved,
                     "is_final": True})
    return pd.DataFrame(rows)


def test_a_final_reply_written_outside_the_plan_is_the_plans_final_output():
    out = ingest_traces(_desk_traces())
    final = out[out.is_final]
    assert len(final) == 4 and set(final.node_id) == {"final"} and set(final.agent) == {"Resolver"}
    assert final.groupby(["task_id", "plan_id"]).size().eq(1).all()  # one final output per execution
    two_agents = final[final.plan_text.str.contains("a2")]
    assert two_agents.depth.tolist() == [2, 2] and [list(p) for p in two_agents.parent_ids] == [["a2"], ["a2"]]
    assert set(out[~out.is_final].agent) == {"WebSearch", "CoT"}  # the plan's own rows keep its types


def test_a_final_reply_outside_the_plan_counts_in_plan_pairs_only():
    from orchrm.data.pairs import build_pairs

    pairs = build_pairs(ingest_traces(_desk_traces()))
    assert len(pairs) == 2 and set(pairs.granularity) == {"plan"}
    assert all("kb_search" in chosen for chosen in pairs.chosen)  # the plan whose final reply resolved the ticket
    assert (pairs.margin == 1.0).all()


def test_a_row_outside_its_plan_that_is_not_final_is_refused_saying_what_to_mark():
    traces = _desk_traces()
    traces.loc[traces.node_id == "final", "is_final"] = False
    with pytest.raises(TraceSchemaError, match=r"column 'node_id': rows 2, 4, 7, 9 have an <agent .*accepted when the row has is_final=true"):
        ingest_traces(traces)


def test_a_plan_id_reused_across_tasks_and_runs_keeps_each_executions_steps():
    two_tasks = _traces().assign(plan_id=["p1", "p1", "p2", "p1"], node_id=["parse", "solve", "solve", "solve"])
    out = ingest_traces(two_tasks)
    assert out.plan_text.iloc[0] == "parse: parser\nsolve: solver" and out.plan_text.iloc[3] == "solve: reader"
    # two runs of one plan: each run has its own final artifact
    runs = pd.concat([_traces().iloc[:2].assign(run_id="r1"), _traces().iloc[:2].assign(run_id="r2")], ignore_index=True)
    out = ingest_traces(runs)
    assert out.groupby(["run_id", "plan_id"]).is_final.sum().eq(1).all()


def test_two_trace_files_of_the_same_tasks_get_different_ids():
    a = ingest_traces(_traces())
    b = ingest_traces(_traces().assign(content=["six by seven", "42", "36", "Paris."]))
    assert set(a.run_id).isdisjoint(b.run_id) and set(a.artifact_id).isdisjoint(b.artifact_id)
    assert ingest_traces(_traces()).run_id.equals(a.run_id)  # and the same file the same ids


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda d: d.drop(columns=["content"]), r"lack required column\(s\): content"),
        (lambda d: d.drop(columns=["answer", "quality"], errors="ignore"), r"quality \(or answer \+ reference\)"),
        (lambda d: d.drop(columns=["node_id"]), r"plan_text \(or node_id \+ agent\)"),
        (lambda d: d.assign(content=["ok", np.nan, "", "ok"]), r"column 'content': empty, NaN or not text in rows 1, 2"),
        (lambda d: d.assign(question=["q", "q", "q", 7]), r"column 'question': empty, NaN or not text in rows 3"),
        (lambda d: d.assign(artifact_id=["x", "y", "x", "z"]), r"column 'artifact_id': duplicate ids in rows 0, 2"),
        (lambda d: d.assign(prompt_tokens=[1, -2, 3.5, "many"]), r"column 'prompt_tokens': not a non-negative integer in rows 1, 2, 3"),
        (lambda d: d.assign(quality=[0.5, 1.5, np.nan, 1.0]).drop(columns=["reference"]), r"column 'quality': outside \[0, 1\] in rows 1"),
        (lambda d: d.assign(quality=[0.5, 1.0, np.nan, 1.0]).drop(columns=["reference"]), r"column 'quality': NaN .* in rows 2"),
        (lambda d: d.assign(plan_text='<agent id="a1" type="Oracle"/>'), r"column 'plan_text': empty or an invalid <agent"),
        (lambda d: d.iloc[0:0], r"no rows"),
        (lambda d: d.assign(plan_id=["p1", None, "p2", "p3"]), r"column 'plan_id': missing in rows 1"),
        (lambda d: d.assign(run_id=[None, "r", "r", "r"]), r"column 'run_id': missing in rows 0"),
        (lambda d: d.assign(artifact_id=["x", None, "y", "z"]), r"column 'artifact_id': missing in rows 1"),
        (lambda d: d.assign(question=["What is 6 * 7?", "What is 6 * 7? ", "What is 6 * 7?", "Capital?"]), r"tasks 't1' have more than one question"),
        (lambda d: d.assign(depth=[0, 1, 40, 0]), r"column 'depth': above 32 in rows 2"),
        (lambda d: d.assign(cost=[1.0, np.inf, 2.0, 3.0]), r"column 'cost': not a finite non-negative number in rows 1"),
        (lambda d: d.assign(created_at=["2026-01-01T00:00:00Z", "yesterday", "2026-01-02", "2026-01-02T10:00"]), r"column 'created_at': not an ISO 8601 time in rows 1"),
        (lambda d: d.assign(parent_ids=[None, "parse", 7, ["a"]]), r"column 'parent_ids': not a comma-separated string or a list of ids in rows 2"),
    ],
)
def test_bad_traces_are_refused_naming_rows_and_columns(change, match):
    with pytest.raises(TraceSchemaError, match=match):
        ingest_traces(change(_traces()))


def test_every_problem_is_reported_at_once():
    bad = _traces().assign(content=["ok", "", "ok", "ok"], artifact_id=["a", "a", "b", "c"])
    with pytest.raises(TraceSchemaError) as info:
        ingest_traces(bad)
    assert "content" in str(info.value) and "artifact_id" in str(info.value)
    # a blank question does not hide another task's second question; missing ids are not duplicates
    bad = _traces().assign(question=["What is 6 * 7?", "What is 6 * 8?", "What is 6 * 7?", " "], artifact_id=None)
    with pytest.raises(TraceSchemaError) as info:
        ingest_traces(bad)
    message = str(info.value)
    assert "column 'question': empty, NaN or not text in rows 3" in message
    assert "tasks 't1' have more than one question" in message
    assert "column 'artifact_id': missing in rows 0, 1, 2, 3" in message and "duplicate" not in message


def test_cli_ingest_writes_nothing_on_error(tmp_path, capsys):
    good, bad, out = tmp_path / "good.jsonl", tmp_path / "bad.jsonl", tmp_path / "out.parquet"
    _traces().to_json(good, orient="records", lines=True)
    assert main(["ingest", "--traces", str(good), "--out", str(out)]) == 0
    assert len(read_table(out)) == 4
    out.unlink()
    _traces().assign(content=["", "x", "y", "z"]).to_json(bad, orient="records", lines=True)
    assert main(["ingest", "--traces", str(bad), "--out", str(out)]) == 2
    assert "column 'content'" in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.glob(".out.parquet.*"))


def test_malformed_jsonl_names_the_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"task_id": "t"}) + "\n{not json\n")
    with pytest.raises(TraceSchemaError, match=r"line 2 is not valid JSON"):
        read_table(path)


def test_a_folder_or_a_csv_file_is_named_for_what_it_is(tmp_path):
    with pytest.raises(TraceSchemaError, match=r"is a folder; give a table file"):
        read_table(tmp_path)
    (tmp_path / "t.csv").write_text("task_id,question\nt1,q\n")
    with pytest.raises(TraceSchemaError, match=r"CSV is not read: convert it to Parquet or JSON Lines"):
        read_table(tmp_path / "t.csv")


def test_corrupt_parquet_is_named(tmp_path):
    path = tmp_path / "t.parquet"
    path.write_bytes(b"PAR1 this is not a parquet file")
    with pytest.raises(TraceSchemaError, match=r"cannot be read as a table"):
        read_table(path)


def test_atomic_write_leaves_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "a.parquet"
    write_table(pd.DataFrame({"x": [1, 2]}), target)

    class Unwritable(pd.DataFrame):
        def to_parquet(self, *args, **kwargs):
            raise OSError("disk full")

    with pytest.raises(OutputPathError, match=r"cannot write .*a\.parquet: disk full"):
        write_table(Unwritable({"x": [3]}), target)
    assert read_table(target).x.tolist() == [1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["a.parquet"]


def test_atomic_write_gives_a_new_file_normal_permissions_and_keeps_an_old_files(tmp_path):
    umask = os.umask(0o022)
    os.umask(umask)
    new = write_table(pd.DataFrame({"x": [1]}), tmp_path / "new.parquet")
    assert new.stat().st_mode & 0o777 == 0o666 & ~umask  # not the temporary file's owner-only 0o600
    kept = tmp_path / "kept.jsonl"
    write_table(pd.DataFrame({"x": [1]}), kept)
    kept.chmod(0o640)
    write_table(pd.DataFrame({"x": [2]}), kept)
    assert kept.stat().st_mode & 0o777 == 0o640 and read_table(kept).x.tolist() == [2]


# --------------------------------------------------------------------------------------------
# the column-wise helpers: what each computes once per distinct value is what each row would get


def test_row_groups_number_groups_by_first_appearance_and_name_each_groups_first_row():
    from orchrm.data.ingest import row_groups

    groups = row_groups(np.array(["p", "q", "p", "p", "q"]), pd.Series(["a1", "a1", "a1", None, "a1"]))
    assert groups.codes.tolist() == [0, 1, 0, 2, 1] and groups.first.tolist() == [0, 1, 3]  # a missing value is a value
    one = row_groups(np.array([3, 3, 1]))
    assert one.codes.tolist() == [0, 0, 1] and one.first.tolist() == [0, 2]
    empty = row_groups(np.array([], dtype=object))
    assert empty.codes.tolist() == [] and empty.first.tolist() == []


BLANKS = ["", " ", "\t\n", "\u3000", "\x1c", "\u00a0", "\u2003 "]
TEXTS = ["a", " a ", "\u00a0x", "日本語", "é", "\u3000\u00e9", "-", "~"]


@pytest.mark.parametrize("dtype", ["str", object])
def test_a_blank_text_cell_is_one_that_str_strip_leaves_empty(dtype):
    from orchrm.data.ingest import _blank

    cells = pd.Series([*BLANKS, *TEXTS, None], dtype=dtype)
    assert _blank(cells).tolist() == [True] * len(BLANKS) + [False] * len(TEXTS) + [True]
    mixed = pd.Series(["ok", 7, ["a"], np.nan, " "], dtype=object)
    assert _blank(mixed).tolist() == [False, True, True, True, True]


def test_each_distinct_plan_text_is_parsed_once(monkeypatch):
    from orchrm.execution import support_desk
    from orchrm.plans import Plan

    parsed = []
    real_parse = Plan.parse.__func__
    monkeypatch.setattr(Plan, "parse", classmethod(lambda cls, text, **kw: parsed.append(text) or real_parse(cls, text, **kw)))
    traces = support_desk.make_traces(5, seed=0)
    ingest_traces(traces)
    assert sorted(parsed) == sorted(support_desk.PLANS.values())


def test_every_row_gets_its_own_plans_node_facts():
    """Mixed traces (two plans, a free-text plan, final replies after a plan): each row's agent,
    depth and parents are those its plan gives its node, as a row-by-row lookup finds them."""
    from orchrm.plans import Plan

    traces = pd.concat([_desk_traces(), _desk_traces().assign(task_id=lambda d: d.task_id + "-b")], ignore_index=True)
    free = pd.DataFrame({"task_id": ["free"], "question": ["Q?"], "plan_text": ["look it up, then reply"],
                         "node_id": ["n1"], "content": ["c"], "quality": [0.1], "is_final": [True]})
    out = ingest_traces(pd.concat([traces, free], ignore_index=True).sample(frac=1.0, random_state=3))
    for row in out.itertuples():
        if row.task_id == "free":
            assert (row.agent, row.depth, list(row.parent_ids)) == ("external", 0, [])
            continue
        plan = Plan.parse(row.plan_text)
        if row.node_id == "final":  # written after the plan: the sink's child
            assert (row.agent, row.depth, list(row.parent_ids)) == ("Resolver", plan.depths()[plan.sink] + 1, [plan.sink])
        else:
            assert (row.agent, row.depth, list(row.parent_ids)) == (plan.node(row.node_id).agent, plan.depths()[row.node_id],
                                                                    list(plan.parents(row.node_id)))


def test_answers_that_are_not_text_are_written_as_python_prints_them():
    answers = pd.Series([0.0, -0.0, 1, True], dtype=object)  # equal as values, not as text
    out = ingest_traces(_traces().assign(answer=answers, quality=0.5))
    assert out.answer.tolist() == ["0.0", "-0.0", "1", "True"]
    scored = ingest_traces(_traces().assign(answer=["42", "42.0", "42", "paris"], reference=[42, 42.0, "42", "Paris"]))
    assert scored.quality.tolist() == [1.0, 1.0, 1.0, 1.0]


def test_executions_without_a_plan_text_join_their_steps_in_row_order():
    from orchrm.data.ingest import _joined_in_groups

    joined = _joined_in_groups(pd.Series(["a: x", "b: y", "c: z", "d: w"]), pd.Series(["k1", "k2", "k1", "k1"]))
    assert joined.tolist() == ["a: x\nc: z\nd: w", "b: y", "a: x\nc: z\nd: w", "a: x\nc: z\nd: w"]
