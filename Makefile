# Two commands matter: `make run` and `make test`. Both create .venv when missing
# and (re)install the project whenever pyproject.toml changes.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run example test lint typecheck unit bench bench-txn bench-tms bench-http bench-spark bench-quick clean \
        bench-deps bench-peers bench-peers-quick

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

example: $(STAMP)
	$(BIN)/python examples/program_states.py

run: $(STAMP)
	$(BIN)/python -m tms.standalone --data-dir ./data

lint: $(STAMP)
	$(BIN)/ruff check txn tms pyspark_tms tests benchmarks examples
	$(BIN)/ruff format --check txn tms pyspark_tms tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest

test: lint typecheck unit

bench: bench-txn bench-tms bench-http bench-spark

bench-txn: $(STAMP)
	$(BIN)/python -m benchmarks.txn_bench

bench-tms: $(STAMP)
	$(BIN)/python -m benchmarks.tms_bench

bench-http: $(STAMP)
	$(BIN)/python -m benchmarks.http_bench

bench-spark: $(STAMP)
	$(BIN)/python -m benchmarks.spark_bench

bench-quick: $(STAMP)
	$(BIN)/python -m benchmarks.txn_bench --quick --out benchmarks/results/txn-quick.json
	$(BIN)/python -m benchmarks.tms_bench --quick --out benchmarks/results/tms-quick.json
	$(BIN)/python -m benchmarks.http_bench --quick --out benchmarks/results/http-quick.json

# Benchmarks against peers (docs/benchmarks.md, "Against peers"): bench-deps installs
# redis-server and PostgreSQL from Debian's packages (once, as root or with sudo); the
# harness starts its own throwaway servers on loopback and never uses the packages' ones.
BENCH_STAMP := $(VENV)/.installed-bench
SUDO        := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	touch $(BENCH_STAMP)

bench-deps:
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y --no-install-recommends redis-server postgresql

bench-peers: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.peers

bench-peers-quick: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.peers --quick

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
