"""``python -m gpucli``: the same program as the ``gpu`` console script."""

from gpucli.main import app

app(prog_name="gpu")
