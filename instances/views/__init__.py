"""instances/views/: the app's pages, one module per topic: catalog, orders (the order page and
the approval inbox), hosts (My hosts, a host's page and their actions) and pools. Their forms are
in instances/forms/; instances/urls.py routes them."""
