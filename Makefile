# `make test` and `make up` both create .venv when missing and install into it.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The TensorFlow baseline of bench/train.py lives in its own venv: never a test dependency.
BASE_VENV := .venv-baselines
BASE_STAMP := $(BASE_VENV)/.installed

.PHONY: test lint up bench-tables bench-freshness bench-train bench-baselines

# numba's on-disk cache checks only the file that defines a kernel, not the modules it calls:
# after an edit to tables/hashmap.py a cached kernel of another module kept the old hashing
# and read stale rows. Keyed by every source file, the cache starts afresh after any change.
export NUMBA_CACHE_DIR := $(CURDIR)/$(VENV)/numba-cache/$(shell cat $(sort $(wildcard */*.py */*/*.py)) 2>/dev/null | cksum | cut -d' ' -f1)

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

$(BASE_STAMP):
	test -x $(BASE_VENV)/bin/python || python3 -m venv $(BASE_VENV)
	$(BASE_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BASE_VENV)/bin/python -m pip install --quiet tensorflow-cpu numpy
	touch $(BASE_STAMP)

bench-baselines: $(BASE_STAMP)

# streamrec train-files and the TensorFlow wide&deep on the same files, in one run.
bench-train: $(STAMP) $(BASE_STAMP)
	$(PY) bench/train.py --baseline-python $(BASE_VENV)/bin/python
