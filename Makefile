# Two commands for a newcomer: `make demo` (install + build/run the default model) and `make test`.
PY ?= .venv/bin/python

.venv/bin/python:
	python3.11 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -e ".[test]"

install: .venv/bin/python

demo: install
	$(PY) scripts/demo.py

test: install
	$(PY) -m pytest -q -x -n 2 tests   # same command as .ci/run and README

.PHONY: install demo test
