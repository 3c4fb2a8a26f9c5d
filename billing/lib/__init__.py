"""billing/lib/: pure helpers, no database:

- money: exact money in rate-seconds, and the one rounding when a figure is shown
- rules: how the seconds of a host become money, the billing rules as one table
"""
