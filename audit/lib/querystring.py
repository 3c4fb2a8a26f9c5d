"""audit/lib/querystring.py: a list page's query string without its page number, what its
pager's links and its refresh carry on (the audit log, My hosts, Jobs). In audit, the lowest
app, so every app's pages reach it."""

from __future__ import annotations


def query_without(params, *names: str) -> str:
    """The query string of ``params`` (a QueryDict) without ``names``."""
    params = params.copy()
    for name in names:
        params.pop(name, None)
    return params.urlencode()
