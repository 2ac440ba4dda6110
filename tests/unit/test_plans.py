import pickle
import random

import pytest

from orchrm.errors import PlanError
from orchrm.execution.samplers import RoleSampler, SpecializedSampler, sample_prior_plan
from orchrm.execution.tasks.base import Task
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


# MAS-Orchestra's schema ---------------------------------------------------------------------------
MAS_FAN_IN = """\
<thinking>
  Two lookups feed a debate; a reflexion pass checks the verdict.
</thinking>
<agent>
  <agent_id>WS_1</agent_id>
  <agent_name>WebSearchAgent</agent_name>
  <agent_description>Look up the founding year.</agent_description>
  <required_arguments>
    <agent_input>When was the company founded?</agent_input>
    <queries>2</queries>
    <top_k>5</top_k>
  </required_arguments>
</agent>
<agent>
  <agent_id>calc</agent_id>
  <agent_name>CoTAgent</agent_name>
  <agent_description>Work out the age.</agent_description>
  <required_arguments>
    <agent_input></agent_input>
    <model>large</model>
  </required_arguments>
</agent>
<agent>
  <agent_id>Judge</agent_id>
  <agent_name>DebateAgent</agent_name>
  <agent_description>Settle on one answer.</agent_description>
  <required_arguments>
    <agent_input>Facts: ${WS_1}
Draft: ${calc}</agent_input>
    <debate_roles>["Historian", "Accountant", "Skeptic"]</debate_roles>
    <rounds>2</rounds>
  </required_arguments>
</agent>
<agent>
  <agent_id>FINAL</agent_id>
  <agent_name>ReflexionAgent</agent_name>
  <agent_description>Check the verdict & units.</agent_description>
  <required_arguments>
    <agent_input>Check: ${Judge}</agent_input>
    <iterations>1</iterations>
  </required_arguments>
</agent>
<edge>
<from>WS_1</from><to>Judge</to>
<from>calc</from><to>Judge</to>
<from>Judge</from><to>FINAL</to>
</edge>
"""

MAS_FAN_IN_AS_OURS = (
    '<agent id="WS_1" type="WebSearch" queries="2" top_k="5"/>\n'
    '<agent id="calc" type="CoT" model="large"/>\n'
    '<agent id="Judge" type="Debate" model="small" agents="3" rounds="2"/>\n'
    '<agent id="FINAL" type="Reflexion" model="small" iterations="1"/>\n'
    '<edge from="WS_1" to="Judge"/>\n<edge from="calc" to="Judge"/>\n<edge from="Judge" to="FINAL"/>'
)

MAS_SINGLE = """\
<agent>
  <agent_id>math_agent</agent_id>
  <agent_name>SCAgent</agent_name>
  <agent_description>Vote over several chains of thought.</agent_description>
  <required_arguments>
    <agent_input></agent_input>
  </required_arguments>
</agent>"""


def test_a_mas_orchestra_plan_is_read_into_our_nodes_params_and_edges():
    plan = Plan.parse(MAS_FAN_IN)
    assert plan.render() == MAS_FAN_IN_AS_OURS
    assert plan == Plan.parse(MAS_FAN_IN_AS_OURS) and plan.plan_id == Plan.parse(MAS_FAN_IN_AS_OURS).plan_id
    assert plan.sink == "FINAL" and plan.depths() == {"WS_1": 0, "calc": 0, "Judge": 1, "FINAL": 2}
    judge = plan.node("Judge")
    assert judge.description == "Settle on one answer."
    assert judge.text_args == {"agent_input": "Facts: ${WS_1}\nDraft: ${calc}", "debate_roles": '["Historian", "Accountant", "Skeptic"]'}
    assert plan.node("FINAL").description == "Check the verdict & units."  # a raw "&" as an LLM writes it


def test_mas_orchestra_parameters_left_out_take_its_own_settings():
    plan = Plan.parse(MAS_SINGLE)
    assert plan.render() == '<agent id="math_agent" type="SelfConsistency" model="small" k="5"/>'
    assert Plan.parse(MAS_SINGLE, tiers=("mini", "max")).node("math_agent").model == "mini"  # the first tier
    plan = Plan.parse(
        "<agent><agent_id>R</agent_id><agent_name>ReflexionAgent</agent_name></agent>"
        "<agent><agent_id>S</agent_id><agent_name>WebSearchAgent</agent_name></agent>"
        "<agent><agent_id>D</agent_id><agent_name>DebateAgent</agent_name>"
        "<required_arguments><debate_roles>['Pro', 'Con']</debate_roles></required_arguments></agent>"
        "<edge><from>S</from><to>R</to><from>R</from><to>D</to></edge>"
    )
    assert plan.render() == (
        '<agent id="S" type="WebSearch" queries="5" top_k="5"/>\n<agent id="R" type="Reflexion" model="small" iterations="5"/>\n'
        '<agent id="D" type="Debate" model="small" agents="2" rounds="4"/>\n<edge from="S" to="R"/>\n<edge from="R" to="D"/>'
    )


@pytest.mark.parametrize(
    "text",
    [
        # one line, no indentation
        "<agent><agent_id>math_agent</agent_id><agent_name>SCAgent</agent_name><agent_description>Vote.</agent_description>"
        "<required_arguments><agent_input></agent_input></required_arguments></agent>",
        # tabs, CRLF line ends, blank lines, spaces inside tags, another case
        "\r\n\r\n\t<Agent>\r\n\t\t< agent_id > math_agent </agent_id>\r\n\t\t<AGENT_NAME>scagent</AGENT_NAME>\r\n"
        "\t\t<required_arguments>\r\n\t\t\t<agent_input/>\r\n\t\t</required_arguments>\r\n\t</agent >\r\n",
        # an empty <edge> block, explicit defaults, an alias and "" as MAS-Orchestra's empty input
        MAS_SINGLE.replace("<agent_input></agent_input>", '<agent_input>""</agent_input><samples>5</samples><model>small</model>')
        + "\n<edge>\n</edge>",
        # required arguments as name: value lines, and as a JSON object
        MAS_SINGLE.replace("<agent_input></agent_input>", "agent_input: \n      k: 5\n      model = 'small'"),
        MAS_SINGLE.replace("<agent_input></agent_input>", '{"agent_input": "", "k": 5, "tier": "small"}'),
    ],
)
def test_mas_orchestra_layout_and_argument_forms_do_not_change_the_plan(text):
    plan = Plan.parse(text)
    assert plan == Plan.parse(MAS_SINGLE)
    assert plan.render() == '<agent id="math_agent" type="SelfConsistency" model="small" k="5"/>'


def test_mas_orchestra_description_and_inputs_are_not_part_of_plan_identity():
    bare = Plan.parse(MAS_FAN_IN_AS_OURS)
    described = Plan.parse(MAS_FAN_IN)
    assert described == bare and hash(described) == hash(bare) and described.plan_id == bare.plan_id
    assert bare.node("Judge").description is None and dict(bare.node("Judge").text_args) == {}
    assert pickle.loads(pickle.dumps(described)).node("Judge").text_args == described.node("Judge").text_args


def test_the_default_render_style_is_ours_and_styles_are_named():
    plan = Plan.parse(MAS_FAN_IN)
    assert plan.render(style="orchrm") == plan.render() == MAS_FAN_IN_AS_OURS
    with pytest.raises(PlanError, match=r"unknown plan style 'json'; use 'orchrm' \(the default\) or 'mas-orchestra'"):
        plan.render(style="json")


def test_render_mas_orchestra_writes_its_schema():
    plan = Plan.parse(CANONICAL)
    assert plan.render(style="mas-orchestra") == (
        "<agent>\n  <agent_id>a1</agent_id>\n  <agent_name>WebSearchAgent</agent_name>\n"
        "  <agent_description>retrieval over the task's corpus (BM25 in the sandbox); model optional</agent_description>\n"
        "  <required_arguments>\n    <agent_input></agent_input>\n    <queries>2</queries>\n    <top_k>5</top_k>\n"
        "  </required_arguments>\n</agent>\n"
        "<agent>\n  <agent_id>a2</agent_id>\n  <agent_name>SCAgent</agent_name>\n"
        "  <agent_description>k independent runs, answer by majority vote</agent_description>\n"
        "  <required_arguments>\n    <agent_input>${a1}</agent_input>\n    <model>small</model>\n    <k>5</k>\n"
        "  </required_arguments>\n</agent>\n"
        "<edge>\n  <from>a1</from><to>a2</to>\n</edge>"
    )


def _role_plans(n: int) -> list[Plan]:
    roles = ["searcher", "math_parser", "strategy_selector", "voter", "calculator"]
    return RoleSampler(roles).sample(Task("t1", "math", "What is 6 * 7?"), n, random.Random(0))


@pytest.mark.parametrize("seed", range(200))
def test_sampled_plans_round_trip_through_the_mas_orchestra_schema(seed):
    plan = sample_prior_plan(random.Random(seed))
    text = plan.render(style="mas-orchestra")
    back = Plan.parse(text)
    assert back == plan and back.render() == plan.render() and back.plan_id == plan.plan_id
    assert back.render(style="mas-orchestra") == text  # canonical in this style too


def test_role_and_specialized_plans_round_trip_through_the_mas_orchestra_schema():
    tasks = [Task("t1", "math", "Natalia sold 48 clips in April and half as many in May. How many in total?"),
             Task("t2", "multihop", "Which river flows through the capital of the country where Ada was born?")]
    plans = _role_plans(12) + [p for t in tasks for p in SpecializedSampler().sample(t, 8, random.Random(1))]
    assert any(n.role for p in plans for n in p.nodes)
    for plan in plans:
        assert Plan.parse(plan.render(style="mas-orchestra")) == plan


@pytest.mark.parametrize("text", [MAS_FAN_IN, MAS_SINGLE])
def test_hand_written_mas_orchestra_plans_round_trip_with_their_descriptions_and_inputs(text):
    plan = Plan.parse(text)
    written = plan.render(style="mas-orchestra")
    back = Plan.parse(written)
    assert back == plan and back.render(style="mas-orchestra") == written
    for a, b in zip(plan.nodes, back.nodes, strict=True):
        assert (a.description, dict(a.text_args)) == (b.description, dict(b.text_args))


@pytest.mark.parametrize(
    "role",
    ['say "hi"', "a<b>c", "fish & chips", "&amp; is already escaped", "it's", "two\nlines", "&quot;", "</role>", "${a1}"],
)
def test_any_text_round_trips_through_the_mas_orchestra_schema(role):
    plan = Plan.build([{"id": "a1", "agent": "CoT", "params": {"model": "small", "role": role},
                        "description": role, "text_args": {"agent_input": role}}])
    back = Plan.parse(plan.render(style="mas-orchestra"))
    assert back == plan and back.nodes[0].role == role
    assert (back.nodes[0].description, back.nodes[0].text_args["agent_input"]) == (role, role)


def _mas(*blocks: str, edges: str = "") -> str:
    return "\n".join(blocks) + (f"\n<edge>{edges}</edge>" if edges else "")


def _block(agent_id: str = "a1", name: str = "CoTAgent", args: str = "", extra: str = "") -> str:
    return (f"<agent><agent_id>{agent_id}</agent_id><agent_name>{name}</agent_name>{extra}"
            f"<required_arguments><agent_input></agent_input>{args}</required_arguments></agent>")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (_block(name="PlannerAgent"), r"<agent> block 1 \('a1'\): unknown agent_name 'PlannerAgent'; use one of CoTAgent \(CoT\), SCAgent"),
        ("<agent><agent_id>a1</agent_id></agent>", r"<agent> block 1 \('a1'\) has no <agent_name>; use one of CoTAgent"),
        ("<agent><agent_name>CoTAgent</agent_name></agent>", r"<agent> block 1 has no <agent_id>; add <agent_id>A1</agent_id>"),
        (_block() + _block(agent_id="1st agent"), r"<agent> block 2: agent_id '1st agent' is invalid; use an id that starts with a letter"),
        (_block(extra="<agent_name>SCAgent</agent_name>"), r"<agent_name> twice in <agent> block 1 \('a1'\): keep one"),
        (_block(extra="<agent_output_id>x</agent_output_id>"), r"unexpected <agent_output_id> in <agent> block 1 \('a1'\); an agent block holds <agent_id>"),
        ("<agent><agent_id>a1</agent_id> stray <agent_name>CoTAgent</agent_name></agent>", r"unexpected text in <agent> block 1: 'stray'"),
        ("<agent><agent_id>a1</agent_id><agent_name>CoTAgent</agent_name>\n" + _block("a2"), r"<agent> block 1 is not closed: add </agent>"),
        (_block() + "\nThe final answer is a1.", r"unexpected text in MAS-Orchestra plan: 'The final answer is a1.'; it holds only"),
        ("<thinking>one agent will do</thinking>\n<agent_name>CoTAgent</agent_name>", r"unexpected text in MAS-Orchestra plan: '<agent_name>CoTAgent"),
        ("<thinking>no agents</thinking><agent>\n</agent>", r"<agent> block 1 has no <agent_id>"),
        (_block(args="<temperature>0.5</temperature>"), r"\('a1', CoTAgent\): unknown argument 'temperature' in <required_arguments>; CoTAgent takes agent_input, model, role"),
        (_block(args="<rounds>2</rounds>"), r"unknown argument 'rounds' in <required_arguments>; CoTAgent takes"),
        (_block(name="SCAgent", args="<debate_roles>['a', 'b']</debate_roles>"), r"unknown argument 'debate_roles' .* SCAgent takes agent_input, k, model, role"),
        (_block(name="SCAgent", args="<k>many</k>"), r"\('a1', SCAgent\): k='many' is not an integer; write <k>2</k> \(independent samples, majority vote, 2..16\)"),
        (_block(name="SCAgent", args="<k>99</k>"), r"node 'a1' \(SelfConsistency\): k=99 is out of range; use 2..16"),
        (_block(name="SCAgent", args="<k>3</k><samples>5</samples>"), r"argument 'k' twice in <required_arguments> \(perhaps under another name\)"),
        (_block(args="<model>huge</model>"), r"node 'a1' \(CoT\): unknown model tier 'huge'; use one of small, large"),
        (_block(name="DebateAgent"), r"\('a1', DebateAgent\): no debaters; add <debate_roles>\[\"Role 1\", \"Role 2\"\]</debate_roles> or <agents>2</agents>"),
        (_block(name="DebateAgent", args="<debate_roles>Pro and Con</debate_roles>"), r"debate_roles 'Pro and Con' is not a list of role names; write <debate_roles>\["),
        (_block(name="DebateAgent", args='<debate_roles>["Pro", "Con"]</debate_roles><agents>3</agents>'), r"agents=3 but 2 debate_roles; give one role per debater"),
        (_block(args="\nthink hard\n"), r"cannot read 'think hard' in <required_arguments>; write one <name>value</name>"),
        (_block(args='{"model": "small",}'), r"<required_arguments> is not valid JSON"),
        (_mas(_block(), edges="<from>a1</from><to>a9</to>"), r"edge 'a1' -> 'a9' is dangling: no node 'a9'; add the node or drop the edge"),
        (_mas(_block(), _block("a2"), edges="<from>a1</from><to>a2</to><from>a2</from><to>a1</to>"), r"cycle through nodes a1, a2; a plan must be a DAG"),
        (_mas(_block(), edges="<from>a1</from><to>a1</to>"), r"self-loop"),
        (_mas(_block(), _block("a2")), r"exactly one sink .* found 2: a1, a2; add edges"),
        (_mas(_block(), _block()), r"node id 'a1' appears twice"),
        (_mas(_block(), _block("a2"), edges="<from>a1</from>"), r"<edge> block: <from>a1</from> has no <to> after it"),
        (_mas(_block(), _block("a2"), edges="<to>a2</to><from>a1</from>"), r"<edge> block: <to>a2</to> after the previous pair"),
        (_mas(_block(), _block("a2"), edges="<from>a1</from><from>a2</from><to>a2</to>"), r"<edge> block: <from>a2</from> after <from>a1</from>"),
        (_mas(_block(), _block("a2"), edges="<from>a1</from> -> <to>a2</to>"), r"unexpected text in the <edge> block: '->'"),
        (_mas(_block(), _block("a2"), edges="<source>a1</source>"), r"unexpected <source> in the <edge> block"),
    ],
)
def test_invalid_mas_orchestra_plans_are_rejected_naming_the_block_and_the_fix(text, match):
    with pytest.raises(PlanError, match=match):
        Plan.parse(text)


def test_our_format_is_still_read_as_ours_and_its_errors_are_unchanged():
    assert Plan.parse(CANONICAL).render() == CANONICAL
    with pytest.raises(PlanError, match=r"unexpected text in plan: 'run a CoT please'"):
        Plan.parse("run a CoT please")
