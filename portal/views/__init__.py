"""portal's pages, one module per concern: ``account`` (sign-in, tokens), ``dashboard``,
``notices``, ``health``, ``errors``. The Quotas page and the project policy pages are instances'
(instances/views/quotas.py, approvals.py, idle.py)."""
