"""`make bench`: run every tests/bench/bench_*.py against a throwaway database and print figures.

Each module defines ``run(report)``; ``report(name, value, note)`` prints one figure. Figures that
compare two things are measured side by side in the same run. Pass module names to run a few:
``python -m tests.bench audit catalog``.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import time


def main(argv: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    import logging

    logging.getLogger("celery").setLevel(logging.WARNING)
    from django.db import connection
    from django.test.utils import setup_test_environment, teardown_test_environment

    import tests.bench as package

    wanted = set(argv)
    modules = [
        name
        for _, name, _ in pkgutil.iter_modules(package.__path__)
        if name.startswith("bench_") and (not wanted or name.removeprefix("bench_") in wanted)
    ]
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    engine = connection.vendor
    print(f"database: {engine}; broker: {django.conf.settings.CELERY_BROKER_URL}")
    try:
        for name in sorted(modules):
            module = importlib.import_module(f"tests.bench.{name}")
            print(f"\n== {name.removeprefix('bench_')}: {(module.__doc__ or '').strip()}")
            started = time.perf_counter()

            def report(figure: str, value: str, note: str = "") -> None:
                print(f"  {figure:<58} {value:>16}  {note}")

            module.run(report)
            print(f"  ({time.perf_counter() - started:.1f} s)")
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        teardown_test_environment()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
