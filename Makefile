# LookBench Pipeline: `make demo` builds a release from the embedded demo shop; `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export DAGSTER_HOME := $(CURDIR)

.PHONY: demo test dev real clean benchmarks chromium

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,models,faiss]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/lookbench demo

# Debian's chromium renders JavaScript pages (Playwright's own browser download does not work here); it is
# installed when missing and we are root, otherwise the JavaScript-rendering tests are skipped.
chromium:
	@command -v chromium >/dev/null 2>&1 || { if [ "$$(id -u)" = 0 ]; then \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium) >/dev/null \
	  || echo "could not install chromium: JavaScript-rendering tests will be skipped"; \
	  else echo "chromium not installed (needs root): JavaScript-rendering tests will be skipped"; fi; }

test: $(STAMP) chromium
	$(PY) -m pytest -q

# The Dagster UI on http://127.0.0.1:3000 with the whole lineage.
dev: $(STAMP)
	$(VENV)/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

# A release from the real pages and photos in ../shared/realdata (never published anywhere).
real: $(STAMP)
	$(VENV)/bin/lookbench build --config configs/realdata.yaml

benchmarks: $(STAMP)
	$(PY) benchmarks/extraction_accuracy.py
	$(PY) benchmarks/topk_search.py

clean:
	rm -rf data .dagster
