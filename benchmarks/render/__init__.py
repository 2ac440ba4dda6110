"""The one renderer of the benchmarks' pages: ``python -m benchmarks.render`` (see ``__main__``).

- :mod:`~benchmarks.render.records`: reading results files, Markdown pieces, provenance lines;
- :mod:`~benchmarks.render.best_of_n`, :mod:`~benchmarks.render.token_efficiency`: the two
  plan-selection pages, with their plots and the README's headline;
- :mod:`~benchmarks.render.collection`, :mod:`~benchmarks.render.ingest`,
  :mod:`~benchmarks.render.training`, :mod:`~benchmarks.render.serving`,
  :mod:`~benchmarks.render.llm_backend`: the pages of the data, ingest, training, serving and
  LLM-backend benchmarks.
"""
