# Every target sets up what it needs: a fresh clone needs only Python 3.11+,
# git, make and (for the polyglot tests) Node.js.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NODE_DIR := tests/polyglot/node

.PHONY: all test lint demo demo-postgres postgres bench dist protos check-protos unasync check-unasync node-deps lint-proto browser vendor-web check-vendor-web clean

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

# The web board's browser tests drive a Chromium: one already on the machine, else
# Debian's (apt-get, when root: no browser is downloaded on such machines), else
# Playwright's own; with none of these the step fails and says what to install.
browser: $(STAMP)
	@if command -v chromium >/dev/null 2>&1; then \
		echo "browser: $$(command -v chromium)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get install -y -q chromium || { apt-get update -q && apt-get install -y -q chromium; }; \
	elif $(PY) -m playwright install chromium; then \
		echo "browser: Playwright's chromium"; \
	else \
		echo "the web board tests need Chromium: install your system's chromium package (Debian: apt-get install chromium) or run '$(PY) -m playwright install chromium'" >&2; \
		exit 1; \
	fi

# The web board's vendored scripts (cytoscape, cytoscape-dagre): fetched from the npm
# registry by `make vendor-web`; `make test` checks them against their recorded sha256 sums.
vendor-web: $(STAMP)
	$(PY) scripts/vendor_web.py

check-vendor-web: $(STAMP)
	$(PY) scripts/vendor_web.py --check

# Lint, format and types (settings in pyproject.toml; the import layers are a test).
lint: $(STAMP)
	$(VENV)/bin/ruff check server client tests bench scripts examples
	$(VENV)/bin/ruff format --check server client tests bench scripts examples
	$(VENV)/bin/mypy

# pytest exits 5 when it collected no test: that fails here like any other failure.
# Tests that time nothing run three at a time (pytest-xdist, one module per worker:
# most of a test's time is spent waiting on daemons, not on the two cores). Those
# that measure latency, fairness, memory, real lease time or what a page's frames
# showed (TIMED_TESTS), and every directory not named here (several daemons on
# PostgreSQL), run afterwards two files at a time: alone they kept a third of the
# two cores busy. The load tests, which flood the daemon from processes of their
# own, run alone last. The slowest tests are listed, to keep the suite within its
# time budget.
# The conformance suite (tests/conformance) runs each of its tests on a SQLite and on a
# PostgreSQL board by itself, whatever --store says: it runs here once, in neither
# `--store postgres` list below. It holds the board's tests (every store verb's
# contract); tests/server keeps the daemon's parts no store changes (and SQLite's own
# machinery), so it runs once too, on SQLite.
PARALLEL_TESTS := tests/conformance tests/server tests/client tests/cli tests/e2e tests/contract tests/mcp tests/polyglot \
	tests/web tests/bench tests/reliability
TIMED_CONTRACT := admission big_batches big_cancels call_burst claim_ended idle_timeout leases memory memory_artifacts \
	overload session_races session_waiters sigterm silent_connections
TIMED_TESTS := tests/e2e/test_sdk_claim_ended.py $(patsubst %,tests/contract/test_%.py,$(TIMED_CONTRACT)) \
	tests/mcp/test_mcp_teammate.py tests/web/test_web_http.py tests/web/test_web_live.py tests/web/test_web_artifacts_http.py \
	$(patsubst %,tests/reliability/test_rel_%.py,chaos crash)
LOAD_TESTS := tests/reliability/test_rel_load.py
PAIRED_TESTS := $(filter-out $(addsuffix /,$(PARALLEL_TESTS)) tests/artifacts/ tests/__pycache__/,$(sort $(wildcard tests/*/))) $(TIMED_TESTS)

# The wire contract suite's files that time nothing (but the full disk, which is SQLite's, and undecodable bytes, health and
# reflection, which no store touches; the hypothesis run of Sessions takes 200 examples
# there, not 2,000) run again on PostgreSQL (`--store postgres`), with the files of
# tests/postgres (several daemons, one board) that time nothing, and the reliability
# suite's hostile clients, commit failures and credentials, at a reduced size (`pick` in
# tests/reliability/rel_harness.py); the rest of tests/postgres, which bounds wake-ups
# across daemons, runs alone. (All of the contract suite on PostgreSQL: `pytest --store
# postgres tests/contract`.) The SDK's end-to-end suite runs on SQLite only: what it
# asks of the store, the contract suite asks on both.
POSTGRES_UNTIMED := $(patsubst %,tests/postgres/test_%.py,server_restart pg_connection two_daemons graph_across_daemons artifacts_across_daemons leases_across_daemons \
	writer_jobs)
POSTGRES_CONTRACT := activity_log artifacts attempts auth bad_input concurrency_keys identity large_messages output plan_gate proposals questions resources \
	reviews progress protocol_first reconnect request_ids restart serve session session_failpoints session_hypothesis team \
	team_pages twin_completions usage_budget watch
POSTGRES_RELIABILITY := $(patsubst %,tests/reliability/test_rel_%.py,commit_failures hostile security)
POSTGRES_TESTS := $(patsubst %,tests/contract/test_%.py,$(POSTGRES_CONTRACT)) \
	$(POSTGRES_RELIABILITY) $(POSTGRES_UNTIMED)
# The contract suite's timed files that exercise the store (the Session races and
# waiters, leases, attempt deadlines, the idle budget, big batches and cascades) and the
# reliability suite's chaos and crashes run on PostgreSQL too, two at a time after the
# paired ones; those that time the daemon's own work (admission, bursts, memory,
# overload, SIGTERM, silent connections, the load tests) run on SQLite.
POSTGRES_TIMED := $(patsubst %,tests/contract/test_%.py,big_batches big_cancels claim_ended idle_timeout leases \
	session_races session_waiters) $(patsubst %,tests/reliability/test_rel_%.py,chaos crash)

# Files go out to the workers in the order collected (--no-loadscope-reorder), in which
# the files that take longest come first (tests/conftest.py's LONG_FILES): pytest-xdist
# would hand out the files with the most tests first, so a long file of one or two tests
# (a hypothesis run, a race of forty teammates, the bench) started last and held the
# run's end while the other workers had nothing left to do.
DIST := --dist loadfile --no-loadscope-reorder

# Python writes its bytecode caches for the tests whatever the environment says
# (PYTHONDONTWRITEBYTECODE, which many container images set): else each of the over a
# thousand daemons the tests start compiles corrald and the SDK from source, and each
# pytest worker rewrites the asserts of every test module again (the PostgreSQL run took
# 215 s of CPU so, 155 s with the caches). They go to __pycache__ directories, which git ignores.
test: export PYTHONDONTWRITEBYTECODE :=
test: $(STAMP) check-protos check-unasync check-vendor-web lint-proto lint browser postgres
	$(PY) -m pytest -q -p no:cacheprovider -n 3 $(DIST) --durations=10 \
		$(addprefix --ignore=,$(TIMED_TESTS) $(LOAD_TESTS)) $(PARALLEL_TESTS)
	$(PY) -m pytest -q -p no:cacheprovider -n 3 $(DIST) --durations=10 --store postgres \
		$(addprefix --ignore=,$(TIMED_TESTS)) $(POSTGRES_TESTS)
	$(PY) -m pytest -q -p no:cacheprovider -n 2 $(DIST) --durations=25 \
		$(addprefix --ignore=,$(POSTGRES_UNTIMED)) $(PAIRED_TESTS)
	$(PY) -m pytest -q -p no:cacheprovider -n 2 $(DIST) --durations=10 --store postgres $(POSTGRES_TIMED)
	$(PY) -m pytest -q -p no:cacheprovider --durations=10 $(LOAD_TESTS)

# The PostgreSQL server the tests will use: CORRAL_TEST_PG_DSN, else 127.0.0.1:5432, else
# a throwaway one from the machine's PostgreSQL binaries; with none of these, say what to install.
postgres: $(STAMP)
	$(PY) -m tests.support.postgres

# The demo needs only corral and its `demo` extra, not the test toolchain (Playwright,
# mypy, ruff): a fresh `make demo` installs that alone (a venv `make test` set up has it).
DEMO_STAMP := $(VENV)/.demo-installed

$(DEMO_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[demo]'
	touch $(DEMO_STAMP)

# The demo serves the web board too: open the printed one-time link to watch the DAG fill in.
demo: $(DEMO_STAMP)
	$(VENV)/bin/corral demo --web 127.0.0.1:0

# The same demo on a PostgreSQL board served by two daemons (a new schema of PG_DSN's database,
# dropped at the end; KEEP_SCHEMA=1 keeps it).
PG_DSN ?= postgresql://postgres@127.0.0.1:5432/postgres
demo-postgres: $(DEMO_STAMP)
	$(VENV)/bin/corral demo --store $(PG_DSN)$(if $(KEEP_SCHEMA), --keep-schema)

bench: $(STAMP)
	$(PY) -m pip install --quiet -r bench/requirements.txt
	$(PY) -m bench

# A wheel of the SDK, CLI and daemon for `pip install` elsewhere.
dist: $(STAMP)
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir dist .

clean:
	rm -rf $(VENV) build dist *.egg-info
