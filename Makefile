# Every target bootstraps its own virtualenv, so a fresh clone needs only python3 (>= 3.11) and make.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Extra pytest arguments, e.g. `make test PYTEST_ARGS="-k claim -x"`.
PYTEST_ARGS ?=

# The Cluster Profile (cluster/) has its own venv with psycopg; the edge venv never gets it.
CLUSTER_VENV ?= .venv-cluster
CPY := $(CLUSTER_VENV)/bin/python
CSTAMP := $(CLUSTER_VENV)/.installed
# The shared PostgreSQL the cluster suite and bench use; each session works in a private database.
EDGE_PG_ADMIN_DSN ?= host=127.0.0.1 port=5432 user=postgres dbname=postgres

.PHONY: venv monitor run test test-browser bench bench-day build fault audit clean test-cluster bench-cluster cross cross-test

# The per-Attempt monitor (docs/monitor.md), built for this host with the system C compiler and
# linked against the host's C library, as the host build's Python is: a static glibc binary is
# 700 KB, which the host artifacts' budgets cannot carry. The router builds link it statically
# against musl with zig cc (build/cross/build-app.sh): about 30 KB, a few hundred KiB of RSS.
MONITOR := edge_runtime/service/native/edge-runtime-monitor
MONITOR_SRC := edge_runtime/service/native/monitor.c
MONITOR_CFLAGS := -Os -Wall -Wextra -D_FORTIFY_SOURCE=2

venv: $(STAMP) $(MONITOR)

monitor: $(MONITOR)

$(MONITOR): $(MONITOR_SRC)
	$(CC) $(MONITOR_CFLAGS) -o $@.tmp $(MONITOR_SRC)
	strip $@.tmp 2>/dev/null || true
	mv $@.tmp $@

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "edge-runtime needs Python >= 3.11")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,build]'
	@touch $@

# Starts the service on a demo database of its own (.demo/ under the checkout), runs a demo command, cancels it.
run: $(STAMP) $(MONITOR)
	EDGE_RUNTIME=$(VENV)/bin/edge-runtime sh build/demo.sh

test: $(STAMP) $(MONITOR)
	$(PY) -m pytest $(PYTEST_ARGS)

# The web panel in a real browser (tests/e2e/test_panel_browser_e2e.py): Debian's chromium (installed
# with apt-get when missing, with a Chinese font) driven by playwright-core from npm
# (tests/browser/package-lock.json), which never downloads a browser of its own, at a phone's and a
# desktop's size, in Chinese and English. Screenshots: .test-output/browser/.
CHROMIUM ?= /usr/bin/chromium
test-browser: $(STAMP) $(MONITOR)
	@test -x $(CHROMIUM) || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)
	@# A Chinese font, or the zh-CN screenshots show boxes (the test reads the text, not the pixels).
	@fc-list :lang=zh | grep -q . || DEBIAN_FRONTEND=noninteractive apt-get install -y fonts-wqy-microhei
	cd tests/browser && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund
	CHROMIUM=$(CHROMIUM) $(PY) -m pytest -p no:cacheprovider tests/e2e/test_panel_browser_e2e.py $(PYTEST_ARGS)

bench: $(STAMP) $(MONITOR)
	$(PY) tests/bench/run.py

# A QingLong user's day at router scale (tests/bench/day.py): 700 schedules from real script headers,
# 10,000 Runs of history, the panel on; idle, a burst at 08:30, a day compressed, the panel's pages.
# Uses the one-folder build in dist/ when there is one (make build). BENCH_DAY_ARGS="--quick" for a smoke run.
BENCH_DAY_ARGS ?=
bench-day: $(STAMP) $(MONITOR)
	$(PY) tests/bench/day.py $(BENCH_DAY_ARGS)

# Skipped when dist/ already holds a build of the same sources (build/build.py --force rebuilds).
# RUNTIME_TMPDIR=/path bakes a fixed unpack directory into the one-file build (docs/building.md: unpack directory).
RUNTIME_TMPDIR ?=
build: $(STAMP) $(MONITOR)
	$(PY) build/build.py $(if $(RUNTIME_TMPDIR),--runtime-tmpdir $(RUNTIME_TMPDIR))

audit: build
	$(PY) artifact_audit.py dist/edge-runtime dist/edge-runtime-*.tar.xz

fault: $(STAMP) $(MONITOR)
	$(PY) -m pytest tests/fault -m fault --fault-mode=long -p no:cacheprovider $(PYTEST_ARGS)

$(CSTAMP): pyproject.toml cluster/pyproject.toml $(MONITOR)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "edge-runtime needs Python >= 3.11")'
	$(PYTHON) -m venv $(CLUSTER_VENV)
	$(CPY) -m pip install --quiet --upgrade pip
	$(CPY) -m pip install --quiet -e . -e './cluster[test]'
	@touch $@

# The conformance suite on both adapters, the PostgreSQL-only tests and the HA gate (needs root
# for the throwaway servers run as the postgres OS user). PostgreSQL is required here: no skips.
test-cluster: $(CSTAMP)
	EDGE_PG_ADMIN_DSN='$(EDGE_PG_ADMIN_DSN)' EDGE_PG_REQUIRED=1 $(CPY) -m pytest -p no:cacheprovider \
		tests/conformance cluster/tests $(PYTEST_ARGS)

# The dispatch repository's cycles, then Runs/s through 1, 2 and 4 serve workers and an idle worker's CPU and RSS,
# then schedule fire latency on 1 and 3 workers and retention at 100k Runs.
bench-cluster: $(CSTAMP)
	EDGE_PG_ADMIN_DSN='$(EDGE_PG_ADMIN_DSN)' $(CPY) cluster/bench/bench_cluster.py
	EDGE_PG_ADMIN_DSN='$(EDGE_PG_ADMIN_DSN)' $(CPY) cluster/bench/bench_workers.py
	EDGE_PG_ADMIN_DSN='$(EDGE_PG_ADMIN_DSN)' $(CPY) cluster/bench/bench_history.py

# Router artifacts (docs/building.md: router builds): TARGET=aarch64-musl|mipsel-musl-sf|mipsel-musl-hf|armv7-musl.
# Caches go to $$EDGE_CROSS_CACHE (default /var/cache/edge-runtime-cross), never into the repo.
TARGET ?=
cross: $(STAMP)
	bash build/cross/cross.sh "$(TARGET)" $(PY)

# Under qemu-user: every built-binary test (test_built_binary*.py), build/demo.sh, the process group, restart re-adoption,
# float results, and the OpenWrt package started in the musl root.
cross-test: $(STAMP) $(MONITOR)
	bash build/cross/cross-test.sh "$(TARGET)" $(PY)

clean:
	rm -rf $(VENV) $(CLUSTER_VENV) dist build/work .pytest_cache .hypothesis $(MONITOR)
