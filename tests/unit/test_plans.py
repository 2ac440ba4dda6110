import pickle
import random

import pytest

from orchrm.errors import PlanError
from orchrm.execution.samplers import sample_prior_plan
from orchrm.plans import Plan

CANONICAL = (
    '<agent id="a1" type="WebSearch" queries="2" top_k="5"/>\n'
    '<agent id="a2" type="SelfConsistency" model="small" k="5"/>\n'
    '<edge from="a1" to="a2"/>'
)


def test_design_example_round_trips_byte_for_byte():
    plan = Plan.parse(CANONICAL)
    assert plan.render() == CANONICAL
    assert plan.sink == "a2"
    assert plan.depths() == {"a1": 0, "a2": 1}


def test_render_is_canonical_whatever_the_input_layout():
    messy = (
        "<edge to='a2' from='a1'/>\n\n  <agent k='5' model='small' type='SelfConsistency' id='a2' />"
        '<agent top_k="5" id="a1" queries="2" type="WebSearch"/>'
    )
    assert Plan.parse(messy).render() == CANONICAL
    assert Plan.parse(messy).plan_id == Plan.parse(CANONICAL).plan_id


@pytest.mark.parametrize("seed", range(200))
def test_sampled_plans_round_trip(seed):
    plan = sample_prior_plan(random.Random(seed))
    text = plan.render()
    assert Plan.parse(text).render() == text
    assert Plan.parse(text) == plan


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('<agent id="a1" type="Oracle" model="small"/>', r"node 'a1': unknown agent type 'Oracle'; use one of CoT"),
        ('<agent id="a1" type="CoT"/>', r"node 'a1' \(CoT\): missing model; add model=\"small\""),
        ('<agent id="a1" type="CoT" model="huge"/>', r"node 'a1' \(CoT\): unknown model tier 'huge'"),
        ('<agent id="a1" type="SelfConsistency" model="small"/>', r"node 'a1' \(SelfConsistency\): missing parameter k; add k="),
        ('<agent id="a1" type="SelfConsistency" model="small" k="99"/>', r"node 'a1' \(SelfConsistency\): k=99 is out of range; use 2..16"),
        ('<agent id="a1" type="SelfConsistency" model="small" k="many"/>', r"node 'a1' \(SelfConsistency\): k='many' is not an integer"),
        ('<agent id="a1" type="CoT" model="small" temperature="2"/>', r"node 'a1' \(CoT\): unknown parameter 'temperature'"),
        (
            '<agent id="a1" type="CoT" model="small"/><edge from="a1" to="a9"/>',
            r"edge 'a1' -> 'a9' is dangling: no node 'a9'",
        ),
        (
            '<agent id="a1" type="CoT" model="small"/><agent id="a2" type="CoT" model="small"/>'
            '<edge from="a1" to="a2"/><edge from="a2" to="a1"/>',
            r"cycle through nodes a1, a2",
        ),
        ('<agent id="a1" type="CoT" model="small"/><edge from="a1" to="a1"/>', r"self-loop"),
        (
            '<agent id="a1" type="CoT" model="small"/><agent id="a2" type="CoT" model="small"/>',
            r"exactly one sink .* found 2: a1, a2",
        ),
        ('<agent id="a1" type="CoT" model="small"/><agent id="a1" type="CoT" model="large"/>', r"node id 'a1' appears twice"),
        ("", r"empty plan text"),
        ("run a CoT please", r"unexpected text in plan"),
        ('<agent type="CoT" model="small"/>', r'needs both id=".." and type=".."'),
        ('<agent id="a1\n" type="CoT" model="small"/>', r"node id 'a1\\n' is invalid"),
        ('<agent id="a1" type="CoT" model="small" model="large"/>', r"attribute 'model' twice in <agent id=\"a1\""),
        ('<agent id="a1" id="b1" type="CoT" model="small"/>', r"attribute 'id' twice"),
        ('<agent id="a1" type="CoT" model="small"/><edge from="a1" from="a1" to="a1"/>', r"attribute 'from' twice"),
    ],
)
def test_invalid_plans_are_rejected_with_the_node_and_the_fix(text, match):
    with pytest.raises(PlanError, match=match):
        Plan.parse(text)


def test_shape_drops_tiers_and_parameters():
    a = Plan.parse('<agent id="a1" type="SelfConsistency" model="small" k="3"/>')
    b = Plan.parse('<agent id="x" type="SelfConsistency" model="large" k="7"/>')
    assert a.shape() == b.shape() == "0:SelfConsistency"
    assert a.plan_id != b.plan_id


def test_prefix_keeps_nodes_up_to_a_depth():
    plan = Plan.parse(
        '<agent id="a1" type="WebSearch" queries="1" top_k="2"/>'
        '<agent id="a2" type="CoT" model="small"/>'
        '<agent id="a3" type="Reflexion" model="large" iterations="1"/>'
        '<edge from="a1" to="a2"/><edge from="a2" to="a3"/>'
    )
    assert [n.id for n in plan.prefix(0)] == ["a1"]
    assert [n.id for n in plan.prefix(1)] == ["a1", "a2"]
    assert plan.max_depth == 2


def test_fan_in_depth_is_one_plus_deepest_parent():
    plan = Plan.parse(
        '<agent id="s" type="WebSearch" queries="1" top_k="2"/><agent id="c" type="CoT" model="small"/>'
        '<agent id="r" type="Reflexion" model="small" iterations="1"/><agent id="v" type="Debate" model="small" agents="2" rounds="1"/>'
        '<edge from="c" to="r"/><edge from="s" to="v"/><edge from="r" to="v"/>'
    )
    assert plan.depths() == {"c": 0, "s": 0, "r": 1, "v": 2}
    assert set(plan.parents("v")) == {"s", "r"}


def test_plans_pickle_for_worker_processes():
    plan = Plan.parse(CANONICAL)
    assert pickle.loads(pickle.dumps(plan)) == plan


def test_role_attribute_round_trips():
    text = '<agent id="a1" type="CoT" model="small" role="math_parser"/>'
    assert Plan.parse(text).render() == text
    assert Plan.parse(text).nodes[0].role == "math_parser"


@pytest.mark.parametrize(
    "role",
    ['say "hi"', "a<b>c", "fish & chips", "&amp; is already escaped", "it's", "two\nlines", "&quot;", ""],
)
def test_any_attribute_text_round_trips_through_render_and_parse(role):
    plan = Plan.build([{"id": "a1", "agent": "CoT", "params": {"model": "small", "role": role}}])
    text = plan.render()
    assert Plan.parse(text) == plan
    assert Plan.parse(text).nodes[0].role == role
    assert Plan.parse(text).render() == text


def test_escaped_attribute_text_is_read_unescaped():
    plan = Plan.parse('<agent id="a1" type="CoT" model="small" role="x &quot;y&quot; &amp; &lt;z&gt; &apos;"/>')
    assert plan.nodes[0].role == "x \"y\" & <z> '"
    assert plan.render() == '<agent id="a1" type="CoT" model="small" role="x &quot;y&quot; &amp; &lt;z&gt; \'"/>'


@pytest.mark.parametrize(
    ("nodes", "edges", "match"),
    [
        ([{"agent": "CoT", "params": {"model": "small"}}], [], r"node \{.*\} has no id; give it id="),
        ([{"id": 1, "agent": "CoT", "params": {"model": "small"}}], [], r"node id 1 is invalid: .* a string"),
        ([{"id": "a1", "params": {"model": "small"}}], [], r"node 'a1' has no agent type"),
        ([{"id": "a1", "agent": "CoT", "params": {"model": "small"}}], [("a1", "a2", "a3")], r"edge \('a1', 'a2', 'a3'\) .* \(from, to\)"),
    ],
)
def test_build_rejects_malformed_nodes_and_edges_with_a_plan_error(nodes, edges, match):
    with pytest.raises(PlanError, match=match):
        Plan.build(nodes, edges)


def test_plans_are_hashable_and_equal_plans_hash_alike():
    a = Plan.parse(CANONICAL)
    b = Plan.parse("<edge to='a2' from='a1'/><agent k='5' model='small' type='SelfConsistency' id='a2'/>"
                   '<agent top_k="5" id="a1" queries="2" type="WebSearch"/>')
    assert a == b and hash(a) == hash(b)
    assert len({a, b, Plan.parse('<agent id="a1" type="CoT" model="small"/>')}) == 2
