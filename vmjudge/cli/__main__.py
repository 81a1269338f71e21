"""`python -m vmjudge.cli`: the `vmjudge` command, run from a checkout."""

from .main import main

main()
