# Two commands matter: `make run` and `make test`. Both create .venv when missing
# and (re)install the project whenever pyproject.toml changes. `make run` installs only
# what serving needs; `make test` adds the dev tools and Spark.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
STAMP  := $(VENV)/.installed
# The native engine is compiled by the install (txn/native/src): reinstall when it changes.
NATIVE := $(wildcard txn/native/src/*.c txn/native/src/*.h)

# `make run` settings: make variables, e.g. `make run HTTP_PORT=8080 AUTH=auth.toml`.
DATA_DIR  ?= ./data
TX_PORT   ?= 15165
HTTP_PORT ?= 15166
RPC_PORT  ?= 15167
CONFIG    ?=
AUTH      ?=
TLS_CERT  ?=
TLS_KEY   ?=

.PHONY: run example test lint typecheck unit bench bench-txn bench-tms bench-http bench-subs bench-spark bench-quick clean \
        bench-deps bench-peers bench-peers-quick interop interop-deps system-deps bench-ha console-screenshots

$(RUN_STAMP): pyproject.toml $(NATIVE)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

example: $(STAMP)
	$(BIN)/python examples/program_states.py

run: $(RUN_STAMP)
	@$(BIN)/python -m tms.standalone --data-dir '$(DATA_DIR)' --tx-port $(TX_PORT) \
		--http-port $(HTTP_PORT) --rpc-port $(RPC_PORT) $(if $(CONFIG),--config '$(CONFIG)') $(if $(AUTH),--auth '$(AUTH)') \
		$(if $(TLS_CERT),--tls-cert '$(TLS_CERT)') $(if $(TLS_KEY),--tls-key '$(TLS_KEY)')

lint: $(STAMP)
	$(BIN)/ruff check txn tms txms_common pyspark_tms txms_testing tests benchmarks examples
	$(BIN)/ruff format --check txn tms txms_common pyspark_tms txms_testing tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy

# The whole suite on the default engine (native: make builds it), then the transaction
# suite again on the pure-Python engine (docs/txn.md, "The native engine").
unit: $(STAMP)
	@$(BIN)/python -c "import sys, txn.native as n; sys.exit(0 if n.AVAILABLE else \
		'the native engine was not built (a C compiler and Python headers are needed)')"
	TXN_ENGINE=native $(BIN)/pytest
	TXN_ENGINE=python $(BIN)/pytest tests/txn tests/integration

test: lint typecheck unit

bench: bench-txn bench-tms bench-http bench-subs bench-spark

bench-txn: $(STAMP)
	$(BIN)/python -m benchmarks.txn_bench

bench-tms: $(STAMP)
	$(BIN)/python -m benchmarks.tms_bench

bench-http: $(STAMP)
	$(BIN)/python -m benchmarks.http_bench

bench-subs: $(STAMP)
	$(BIN)/python -m benchmarks.subs_bench

# The highly available transaction service (needs `make system-deps`): cycles/s with the
# state in PostgreSQL vs the local log, and the failover time over 20 kills of the leader.
bench-ha: $(STAMP)
	$(BIN)/python -m benchmarks.ha_bench

bench-spark: $(STAMP)
	$(BIN)/python -m benchmarks.spark_bench

bench-quick: $(STAMP)
	$(BIN)/python -m benchmarks.txn_bench --quick --out benchmarks/results/txn-quick.json
	$(BIN)/python -m benchmarks.tms_bench --quick --out benchmarks/results/tms-quick.json
	$(BIN)/python -m benchmarks.http_bench --quick --out benchmarks/results/http-quick.json
	$(BIN)/python -m benchmarks.subs_bench --quick --out benchmarks/results/subs-quick.json

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

# Every Debian package the tests need, in one step (as root or with sudo; .ci/run runs it
# bounded to 10 minutes): Apache Thrift's compiler and Java library for the generated-client
# test, ZooKeeper and PostgreSQL for the highly available mode (the tests start their own
# throwaway ensemble and cluster on loopback, never the packages' services). A test whose
# engine is missing is skipped. Chromium and its WebDriver run the console's browser tests.
SYSTEM_PACKAGES := thrift-compiler libthrift-java libslf4j-java zookeeper postgresql \
                   chromium chromium-driver zsh

system-deps:
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y --no-install-recommends $(SYSTEM_PACKAGES)

interop-deps: system-deps

interop: $(STAMP)
	$(BIN)/python -m tests.interop

# The screenshots of docs/console.md, from a seeded stack in headless Chromium.
console-screenshots: $(STAMP)
	$(BIN)/python -m tests.console.screenshots docs/img

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
