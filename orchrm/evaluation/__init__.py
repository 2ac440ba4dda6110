"""Held-out evaluation: pure metrics, candidate pools, best-of-N selectors, gates, the report and its plots."""
