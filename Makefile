# LookBench Pipeline: `make demo` builds a release from the embedded demo shop; `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DEV_PORT ?= 3000
STAMP := $(VENV)/.installed
export DAGSTER_HOME := $(CURDIR)

.PHONY: demo test dev lock real realdata-present clean benchmarks chromium postgresql
.PHONY: vllm-env vllm-model vllm-server vllm-check

# What `make demo` / `make test` install: the build stack and everything the tests use, every package at the version
# constraints.txt pins (the whole dependency closure, so a fresh clone and CI get the set the tests passed with, not
# whatever was released since). pyproject.toml keeps the ranges a consumer install resolves freely.
EXTRAS := build,test,models,faiss,deploy

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[$(EXTRAS)]'
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

# Debian's PostgreSQL server for the tests of the PostgreSQL-backed Dagster instance (tests/test_instance_postgres.py
# starts a temporary cluster); installed when missing and we are root, otherwise those tests are skipped.
postgresql:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql) >/dev/null \
	  || echo "could not install postgresql: the PostgreSQL instance tests will be skipped"; \
	  else echo "postgresql not installed (needs root): the PostgreSQL instance tests will be skipped"; fi; }

test: $(STAMP) chromium postgresql
	$(PY) -m pytest -q

# The Dagster UI on http://127.0.0.1:3000 with the whole lineage.
# dagster dev stops on SIGINT, and on SIGTERM, which it maps to SIGINT's handler: a shell that starts it in the
# background (`make dev &`, a service script) ignores SIGINT, so both would be ignored. The handlers are reset
# before it starts, so Ctrl-C, `kill <make's pid>` and `kill <dagster's pid>` stop it with its webserver and daemon.
dev: $(STAMP)
	$(PY) -c 'import os, signal, sys; [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGTERM)]; \
	os.execv(sys.argv[1], sys.argv[1:])' $(VENV)/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p $(DEV_PORT)

# A release from the real pages and photos in ../shared/realdata (never published anywhere). configs/realdata.yaml
# names them relative to itself, so the data must lie there: beside the checkout (or a link to it there).
# The check comes first among the prerequisites, so a missing folder stops it before the install.
real: realdata-present $(STAMP)
	$(VENV)/bin/lookbench build --config configs/realdata.yaml

realdata-present:
	@test -d ../shared/realdata/pages || { echo "make real: no real data at $(abspath ..)/shared/realdata" \
	"(configs/realdata.yaml reads ../shared/realdata beside the checkout: put it there or link it," \
	"ln -s /path/to/realdata ../shared/realdata)" >&2; exit 2; }

benchmarks: $(STAMP)
	$(PY) benchmarks/extraction_accuracy.py
	$(PY) benchmarks/topk_search.py

clean:
	rm -rf data .dagster

# Re-pins constraints.txt: resolves pyproject.toml's ranges afresh in a throwaway environment (the newest releases
# the configured indexes offer) and writes every installed package's version, pip's and setuptools' included, with
# the Python version, OS and machine it was resolved on (tests/test_constraints.py checks the closure there only).
# Run it to take newer libraries, then `make test` (the stamp depends on constraints.txt, so .venv is reinstalled
# with them) and commit the file if the tests pass. A failed install or freeze leaves constraints.txt as it was.
LOCK_VENV := .venv-lock
LOCK_PLATFORM := import platform as p; print("Python", p.python_version(), "on", p.system(), p.machine())
lock:
	rm -rf $(LOCK_VENV) constraints.txt.new
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install -q --upgrade pip
	$(LOCK_VENV)/bin/python -m pip install -q -e '.[$(EXTRAS)]'
	$(LOCK_VENV)/bin/python -c '$(LOCK_PLATFORM)' > $(LOCK_VENV)/platform.txt
	{ echo "# Every package 'pip install -e .[$(EXTRAS)]' installs, pinned: the Makefile installs"; \
	  echo "# with '-c constraints.txt'. Resolved by 'make lock' on $$(date -u +%Y-%m-%d), for"; \
	  echo "# $$(cat $(LOCK_VENV)/platform.txt);"; \
	  echo "# committed once 'make test' passed with it."; \
	  $(LOCK_VENV)/bin/python -m pip freeze --all --exclude-editable; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf $(LOCK_VENV)

# A real vLLM server for the integration tests (tests/test_vllm_real.py), in its own environment .venv-vllm
# (pinned in tests/vllm/requirements*.txt; why these versions: the comment there), serving a tiny randomly
# initialised Qwen2.5-VL model built offline into .cache/. `.ci/run` starts and stops it; docs/VLLM_TESTING.md.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

$(VLLM_STAMP): tests/vllm/requirements.txt tests/vllm/requirements-vllm.txt
	rm -rf $(VLLM_VENV)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q pip==26.3
	$(VLLM_VENV)/bin/python -m pip install -q -r tests/vllm/requirements.txt
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps -r tests/vllm/requirements-vllm.txt
	$(MAKE) vllm-check
	touch $(VLLM_STAMP)

vllm-env: $(VLLM_STAMP)

# vLLM imports, with the Qwen2.5-VL model code (which needs torchvision to import).
vllm-check:
	$(VLLM_VENV)/bin/python -c "import torch, torchvision, vllm, vllm.model_executor.models.qwen2_5_vl; \
	print('vllm', vllm.__version__, 'torch', torch.__version__, 'torchvision', torchvision.__version__)"

vllm-model: $(VLLM_STAMP)
	$(VLLM_VENV)/bin/python tests/vllm/build_tiny_qwen.py

# Foreground server on http://127.0.0.1:$(VLLM_PORT); in another shell:
# LOOKBENCH_VLLM_URL=http://127.0.0.1:8000 .venv/bin/python -m pytest -q tests/test_vllm_real.py
VLLM_PORT ?= 8000
vllm-server: vllm-model
	$(PYTHON) tests/vllm/server.py serve --port $(VLLM_PORT)
