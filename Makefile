# Every target sets up what it needs: a fresh clone needs only Python 3.11+,
# git, make and (for the polyglot tests) Node.js.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NODE_DIR := tests/polyglot/node

.PHONY: all test lint demo bench dist protos check-protos unasync check-unasync node-deps lint-proto clean

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

protos: $(STAMP)
	$(PY) scripts/gen_protos.py

check-protos: $(STAMP)
	$(PY) scripts/gen_protos.py --check

# The sync SDK modules are written from their asyncio sources in corral/aio.
unasync: $(STAMP)
	$(PY) scripts/unasync.py

check-unasync: $(STAMP)
	$(PY) scripts/unasync.py --check

node-deps:
	@command -v node >/dev/null || { echo "Node.js is required for the polyglot tests (tests/polyglot): install node and npm" >&2; exit 1; }
	cd $(NODE_DIR) && npm ci --silent --no-audit --no-fund

# The buf CLI ships inside its npm package, so the contract is linted offline.
lint-proto: node-deps
	$(NODE_DIR)/node_modules/.bin/buf lint proto

# Lint, format and types (settings in pyproject.toml; the import layers are a test).
lint: $(STAMP)
	$(VENV)/bin/ruff check server client tests bench scripts
	$(VENV)/bin/ruff format --check server client tests bench scripts
	$(VENV)/bin/mypy

# pytest exits 5 when it collected no test: that fails here like any other failure.
test: $(STAMP) check-protos check-unasync lint-proto lint
	$(PY) -m pytest -q -p no:cacheprovider tests

demo: $(STAMP)
	$(VENV)/bin/corral demo

bench: $(STAMP)
	$(PY) -m pip install --quiet -r bench/requirements.txt
	$(PY) -m bench

# A wheel of the SDK, CLI and daemon for `pip install` elsewhere.
dist: $(STAMP)
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir dist .

clean:
	rm -rf $(VENV) build dist *.egg-info
