# The two commands: `make demo` and `make test`. Both bootstrap a local virtualenv.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
DEMO_ARGS ?=
PYTEST_ARGS ?=

.PHONY: demo test test-fast lint services bench clean

$(STAMP): pyproject.toml adapters/nats/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]' -e adapters/nats
	rm -f $(VENV)/.installed-* && touch $@

demo: $(STAMP)
	$(BIN)/python -m examples.shop $(DEMO_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check reventless adapters tests examples bench conftest.py
	$(BIN)/ruff format --check reventless adapters tests examples bench conftest.py
	$(BIN)/mypy
	$(BIN)/mypy --strict adapters/nats/reventless_nats

# Local services the suite talks to (started if they are down; see infra/local/).
services:
	bash infra/local/postgres.sh
	bash infra/local/nats.sh
	bash infra/local/java.sh

# Spark (the `spark` tests): loopback only, few shuffle partitions on this small machine.
test: export SPARK_LOCAL_IP ?= 127.0.0.1
test: export REVENTLESS_SPARK_PARTITIONS ?= 2
test: lint services
	$(BIN)/pytest $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/pytest -m "not slow and not postgres and not nats and not aws and not spark" $(PYTEST_ARGS)

# Benchmarks (not part of `make test`): SQLite + PostgreSQL, then JetStream fan-out.
bench: $(STAMP) services
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python -m bench --store all --out BENCHMARKS.md $(BENCH_ARGS)
	$(BIN)/python -m bench.nats_fanout --out BENCHMARKS.md

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
