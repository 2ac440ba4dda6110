"""Running plans: the executor, plan samplers, collection and the sandbox backend (its agents, task suites and noise config)."""
