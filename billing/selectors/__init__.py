"""billing/selectors/: the reads of billing's tables (docs/design.md rule 1), one module per
topic:

- reports: the cost reports, read from the daily rollups and rounded once for display
"""
