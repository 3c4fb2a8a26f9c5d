"""gunicorn's settings for the portal's web process (the Dockerfile and docker compose start
gunicorn with ``--config gunicorn.conf.py``).

Request limits, checked by gunicorn before Django sees the request: a request line (method,
path, query, version) longer than ``limit_request_line`` bytes answers 414, a header field
(name and value) longer than ``limit_request_field_size`` bytes or more than
``limit_request_fields`` headers answer 431 (or 400), from gunicorn itself, so such a request
leaves no audit row. Below these limits the portal applies its own, smaller ones
(``PORTAL_MAX_PATH_LENGTH``, ``PORTAL_MAX_QUERY_LENGTH``, ``PORTAL_MAX_HEADER_LENGTH``,
``DJANGO_DATA_UPLOAD_MAX_MEMORY_SIZE``), answering 414, 431 or 413 with the API's error body and
an audit row. tests/audit/test_request_limits.py checks that the portal's limits fit inside
gunicorn's.
"""

# The most gunicorn allows; the portal's own path (2,048) and query (4,096) limits fit in it.
limit_request_line = 8190
limit_request_fields = 100
# Twice the portal's PORTAL_MAX_HEADER_LENGTH (8,192), so that a header just over the portal's
# limit reaches the portal and is refused with an audit row.
limit_request_field_size = 16384

# gunicorn's access line, with the request id the portal answered with (X-Request-ID), so an
# access line leads to the app's lines and the audit rows of the same request.
access_log_format = (
    '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" request_id=%({x-request-id}o)s'
)


def child_exit(server, worker):
    """A gunicorn worker died: prometheus-client's multiprocess mode drops its live gauges
    (its counters stay in the shared folder and keep counting towards the totals)."""
    from portal.metrics import mark_process_dead

    mark_process_dead(worker.pid)
