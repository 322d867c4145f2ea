# LookBench Pipeline: `make demo` builds a release from the embedded demo shop; `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export DAGSTER_HOME := $(CURDIR)

.PHONY: demo test dev real clean benchmarks

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/lookbench demo

test: $(STAMP)
	$(PY) -m pytest -q

# The Dagster UI on http://127.0.0.1:3000 with the whole lineage.
dev: $(STAMP)
	$(VENV)/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

# A release from the real pages and photos in ../shared/realdata (never published anywhere).
real: $(STAMP)
	$(VENV)/bin/lookbench build --config configs/realdata.yaml

benchmarks: $(STAMP)
	$(PY) benchmarks/extraction_accuracy.py

clean:
	rm -rf data .dagster
