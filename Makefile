# `make test` and `make up` both create .venv when missing and install into it.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test lint up bench-tables bench-freshness

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q

# The whole system locally: broker, generator, shards, trainers and the API on 127.0.0.1:8000.
up: $(STAMP)
	$(VENV)/bin/streamrec up

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

bench-tables: $(STAMP)
	$(PY) bench/tables.py

bench-freshness: $(STAMP)
	$(PY) bench/freshness.py
