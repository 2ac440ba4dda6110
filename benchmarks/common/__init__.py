"""What the benchmark scripts share, so that no script imports another's internals.

- :mod:`~benchmarks.common.results_io`: results files, written whole or not at all, with the
  command, commit and machine they were measured with;
- :mod:`~benchmarks.common.steps`: the cached collect -> pairs -> fit -> pool steps;
- :mod:`~benchmarks.common.targets`: the targets each benchmark is judged by, which the renderer
  quotes;
- :mod:`~benchmarks.common.candidates`: questions with sampled candidate plans (scoring speed);
- :mod:`~benchmarks.common.plan_pairs`: the plan-pair samples and accuracy of the trainer comparisons;
"""
