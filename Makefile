# vmjudge: `make demo` sets up this host and runs the main job; `make test` runs every test.
PYTHON ?= /usr/bin/python3
VENV := .venv
STAMP := $(VENV)/.installed-stamp
TOOLS := $(VENV)/.tools-stamp
# Nested KVM hangs on the project's own machines; organisers' hosts use kvm (see docs/organisers.md).
export VMJUDGE_ACCEL ?= tcg

.PHONY: setup tools host host-tools test lint demo clean

# What judging needs and nothing else: the host's packages, and vmjudge with its own dependencies.
setup: host $(STAMP)

# The tests' and the documentation's tools (pytest, selenium, mypy, ruff, mkdocs, ...), into the same
# virtualenv, for `make test` and `make lint` only: a production host has none of them.
tools: host-tools $(TOOLS)

host-tools:
	@vmjudge/host/setup-host --tools

host:
	@vmjudge/host/setup-host

$(STAMP): setup.cfg pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e .
	touch $(STAMP)

$(TOOLS): $(STAMP)
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $(TOOLS)

# Two sessions, one after the other, both run whatever the first gave: the host tests (no VM; they
# wait on servers, browsers and subprocesses more than on the CPU) in 4 pytest-xdist workers, then the
# VM tests (those using the `site` fixture, which holds the host) in one, as guests need both cores.
test: setup tools lint
	$(VENV)/bin/pytest -q -rs --durations=10 -n 4 --part host tests; host=$$?; \
	$(VENV)/bin/pytest -q -rs --durations=25 --part vm tests; vm=$$?; \
	echo "make test: host tests exit $$host, VM tests exit $$vm"; test $$host -eq 0 -a $$vm -eq 0

# The house rules: layers (setup.cfg [importlinter]), lint (pyproject.toml), types (setup.cfg [mypy]),
# and the documentation site (mkdocs.yml): --strict fails on a broken link or a page missing from nav.
lint: setup tools
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy vmjudge
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir site

demo: setup
	$(VENV)/bin/vmjudge image build examples/minimal
	scripts/demo

clean:
	rm -rf $(VENV) *.egg-info site
