"""billing/services/: the writers of billing's tables (docs/design.md rule 1), one module per
topic; import them by module (``from billing.services.metering import usage_meter``):

- prices: the spot and list price histories, and the rate a host pays at each second
- metering: status moves and price histories become usage rows; a host's cost so far
- rollups: usage summed by day for reports, kept exact by deltas
- budgets: where a project stands against its budget, the order-time check, the notices
- cur: an AWS Cost and Usage Report read and compared with metered usage

The pure rules and exact money are billing/lib/; the cost report reads, billing/selectors/.
"""
