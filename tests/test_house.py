"""The house rules of #12 that no linter checks: small modules, and every package saying what
lives in it."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "vmjudge"
MAX_LINES = 350


def test_no_module_is_longer_than_the_limit():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_every_package_says_what_lives_in_it():
    packages = sorted(PACKAGE.rglob("__init__.py"))
    assert len(packages) >= 15  # the tree is really walked
    silent = [str(p.relative_to(PACKAGE)) for p in packages
              if len(ast.get_docstring(ast.parse(p.read_text())) or "") < 30]
    assert silent == []
