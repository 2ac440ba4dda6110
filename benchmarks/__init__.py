"""OrchRM's benchmarks: each script measures one thing and writes ``results/<name>.json``; one
renderer builds every page from those files.

    python -m benchmarks.best_of_n           # measure: benchmarks/results/best_of_n.json
    python -m benchmarks.render              # results/*.md, docs/results.md, the plots, the README block
    python -m benchmarks.render --check      # exit 1, naming the stale file
    python -m benchmarks.run_all             # the benchmarks of run_all.BENCHES, then the renderer

The scripts: ``accuracy``, ``best_of_n``, ``collect``, ``latency``, ``pairs``, ``plan_choice``,
``registry``, ``sweep_defaults``, ``token_efficiency``, ``train`` and ``gpu_train`` (a GPU machine's
section of ``train.json``). What they share lives in :mod:`benchmarks.common`; the pages in
:mod:`benchmarks.render`. Run them from the project's root.

Every benchmark runs offline with telemetry off: importing this package applies
``orchrm/util/offline.env`` (the settings the environment lacks), before any script imports a
library that reads them.
"""

from orchrm.util.offline import apply_offline_env

apply_offline_env()
