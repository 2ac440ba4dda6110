"""The sandbox multi-agent system: every agent type, no LLM needed (DESIGN §4).

:class:`~orchrm.execution.sandbox.engine.SandboxBackend` runs plan nodes;
:func:`~orchrm.execution.sandbox.engine.make_domain` returns the simulator of a task's domain
(tasks that carry no simulation metadata get the generic one). Its noise model is
:mod:`orchrm.execution.sandbox.config`, which loads without any simulator, so this package
imports nothing on its own.
"""
