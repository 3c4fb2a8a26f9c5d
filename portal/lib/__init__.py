"""portal/lib/: the project's plumbing every app uses: errors a user can cause, how pages and
the API answer them (pages, rest, parsers, schema), sign-in by token and the role backend
(authentication, backends), the settings' environment readers (env) and Celery's view for
operators (celery_ops)."""
