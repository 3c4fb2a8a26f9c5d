"""portal's pages, one module per concern: ``account`` (sign-in, tokens), ``dashboard``,
``quotas`` (quotas and approval policies), ``health``."""
