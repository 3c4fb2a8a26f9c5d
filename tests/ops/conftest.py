"""The ops tests' fixtures: the pool fixture of the instances tests, for the pool metrics."""

from tests.instances.pool_helpers import make_pool  # noqa: F401
