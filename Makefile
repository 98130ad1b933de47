# rlhealth developer targets. `make test` is what CI runs (.ci/run).
#
#   make setup        .venv with python >= 3.11 and `pip install -e '.[test]' -c constraints.txt`
#   make test         setup, lint, start a Kafka broker (unless KAFKA_BOOTSTRAP is set), pytest, stop the broker
#   make lint         ruff over the repository and mypy over the rlhealth package; fails on any finding
#   make demo         probe the example capture, embedded (no Kafka)
#   make kafka-start  start the dev broker (.kafka/), prints its bootstrap address
#   make kafka-stop   stop it
#   make bench        run every bench/*.py
#   make clean        stop brokers, remove .venv, .kafka and caches (the Kafka jar cache is kept)
#
# PYTEST_ARGS="-k foo -x" passes arguments to pytest.

SHELL := /bin/bash
.DEFAULT_GOAL := test

VENV        := .venv
PY          := $(VENV)/bin/python
PYTHON      ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
                 command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
                 && { command -v $$p; break; }; done)
KAFKA_SH    := scripts/kafka.sh
# The test broker has its own state dir, so `make test` never stops a broker started by `make kafka-start`.
TEST_KAFKA_DIR := $(CURDIR)/.kafka/make-test
STAMP       := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: setup lint test test-deps demo kafka-start kafka-stop bench clean

setup: $(STAMP)

# Reinstall when the dependency declarations or the native helper change (pip builds it, see pyproject).
$(STAMP): pyproject.toml constraints.txt $(wildcard rlhealth/_native/*.c rlhealth/_native/*.h)
	@if [ ! -x "$(PY)" ]; then \
	  if [ -z "$(PYTHON)" ]; then echo "make setup: need python >= 3.11 (set PYTHON=...)" >&2; exit 1; fi; \
	  echo "creating $(VENV) with $(PYTHON)"; \
	  "$(PYTHON)" -m venv "$(VENV)"; \
	fi
	$(PY) -m pip install -q -e '.[test]' -c constraints.txt
	@touch $(STAMP)

# Both run in full (every finding is shown) and either one's findings fail the target. The import
# layering is checked by pytest (tests/test_architecture.py runs import-linter).
lint: setup
	@rc=0; \
	$(VENV)/bin/ruff check . || rc=1; \
	$(VENV)/bin/mypy || rc=1; \
	exit $$rc

# lint runs first: `make test` fails on a lint finding before a broker is started.
# One recipe, one shell: the trap stops the broker whatever pytest does (failure, Ctrl-C), and
# pytest's exit code is the target's. Exit code 5 (no tests collected) is turned into a failure
# with a message: CI must never pass by running nothing.
# Debian's prometheus package gives promtool (alert rules, metrics exposition) and the prometheus
# server the end-to-end alerting test starts; prometheus-alertmanager gives amtool (routing example).
# Debian's chromium renders the HTML incident report headless (tests/test_html_report_browser.py; it
# must be /usr/bin/chromium). Tests that need a missing binary are skipped with the reason (the
# browser test only outside CI: in CI a missing chromium fails it).
TEST_DEBS := prometheus:promtool prometheus:prometheus prometheus-alertmanager:amtool chromium:/usr/bin/chromium
test-deps:
	@missing=""; for pair in $(TEST_DEBS); do \
	  command -v "$${pair#*:}" >/dev/null 2>&1 || missing="$$missing $${pair%%:*}"; \
	done; \
	missing="$$(echo $$missing | tr ' ' '\n' | sort -u | tr '\n' ' ')"; \
	if [ -n "$${missing// /}" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian packages for the tests:$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null) \
	      || echo "make test: could not install$$missing (tests needing them will be skipped)" >&2; \
	  else echo "make test: missing$$missing and not root: tests needing them will be skipped" >&2; fi; \
	fi

test: setup lint test-deps
	@set -uo pipefail; \
	if [ -n "$${KAFKA_BOOTSTRAP:-}" ]; then \
	  echo "using Kafka at $$KAFKA_BOOTSTRAP (KAFKA_BOOTSTRAP)"; \
	else \
	  export RLHEALTH_KAFKA_DIR="$(TEST_KAFKA_DIR)"; \
	  trap '$(KAFKA_SH) stop >/dev/null || echo "make test: stopping the test broker failed" >&2' EXIT; \
	  KAFKA_BOOTSTRAP="$$($(KAFKA_SH) start)" || { echo "make test: could not start Kafka" >&2; exit 1; }; \
	  export KAFKA_BOOTSTRAP; \
	fi; \
	export RLHEALTH_KAFKA_BOOTSTRAP="$$KAFKA_BOOTSTRAP"; \
	$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; rc=1; fi; \
	exit $$rc

demo: setup
	$(VENV)/bin/rlhealth probe rlhealth/examples/capture-healthy

kafka-start:
	@$(KAFKA_SH) start

kafka-stop:
	@$(KAFKA_SH) stop

bench: setup
	@set -e; shopt -s nullglob; files=(bench/*.py); \
	if [ $${#files[@]} -eq 0 ]; then echo "no bench/*.py yet"; exit 0; fi; \
	for f in "$${files[@]}"; do echo "== $$f"; $(PY) "$$f"; done

clean:
	-@RLHEALTH_KAFKA_DIR="$(TEST_KAFKA_DIR)" $(KAFKA_SH) stop 2>/dev/null
	-@RLHEALTH_KAFKA_DIR="$(CURDIR)/.kafka/pytest" $(KAFKA_SH) stop 2>/dev/null
	-@$(KAFKA_SH) stop 2>/dev/null
	rm -rf $(VENV) .kafka .pytest_cache .hypothesis .ruff_cache .mypy_cache .import_linter_cache bench/out build dist \
	  *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
