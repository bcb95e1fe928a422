# The two commands: `make demo` and `make test`. Both bootstrap a local virtualenv.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
DEMO_ARGS ?=
PYTEST_ARGS ?=

.PHONY: demo test test-fast lint services bench clean

$(STAMP): pyproject.toml adapters/nats/pyproject.toml adapters/aws/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]' -e adapters/nats
	$(BIN)/python -m pip install --quiet -e '.[aws]' -e 'adapters/aws[typing]'
	rm -f $(VENV)/.installed-* && touch $@

demo: $(STAMP)
	$(BIN)/python -m examples.shop $(DEMO_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check reventless adapters tests examples bench conftest.py
	$(BIN)/ruff format --check reventless adapters tests examples bench conftest.py
	$(BIN)/mypy
	$(BIN)/mypy --strict adapters/nats/reventless_nats
	$(BIN)/mypy --strict adapters/aws/reventless_aws
	$(BIN)/lint-imports

# Local services the suite talks to (started if they are down; see infra/local/).
services:
	bash infra/local/postgres.sh
	bash infra/local/nats.sh
	bash infra/local/java.sh
	bash infra/local/chromium.sh
	bash infra/local/asyncapi.sh
	bash infra/local/tmux.sh

# Spark (the `spark` tests): loopback only, few shuffle partitions on this small machine.
test: export SPARK_LOCAL_IP ?= 127.0.0.1
test: export REVENTLESS_SPARK_PARTITIONS ?= 2
# Two workers (pytest-xdist; the tests that share a Spark session run on one of them, see
# conftest.py): many tests wait on processes, fsyncs and networks rather than the CPU.
# Three kept the CPU 94-96% busy here, and in each of two runs a test that waits on other
# processes timed out.
# A backstop beyond pytest-timeout's per-test limit: the whole run ends within 45 minutes.
# The repo's modules are compiled to bytecode first: the suite starts hundreds of Python
# processes (CLI runs, writer processes, Spark's Python workers) that import them, and
# where the environment says PYTHONDONTWRITEBYTECODE none of them would write the cache,
# so each would compile every module again.
test: lint services
	$(BIN)/python -m compileall -q reventless adapters examples tests > /dev/null
	timeout -k 60 2700 $(BIN)/pytest -n 2 --dist loadgroup $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/pytest -m "not slow and not postgres and not nats and not aws and not spark" $(PYTEST_ARGS)

# Benchmarks (not part of `make test`): SQLite + PostgreSQL, JetStream fan-out, SNS/SQS,
# Spark rebuilds, subscriptions and collector predicates.
# `make bench QUICK=1` is a smoke run of the same harness (small sizes, one repetition, all
# in one interpreter: bench/quick.py; ~100 s here); it writes its report and plots under
# $(BENCH_QUICK_DIR), not the repo.
QUICK ?=
BENCH_QUICK_DIR ?= $(or $(TMPDIR),/tmp)/reventless-bench-quick
BENCH_STAMP := $(VENV)/.bench-$(shell cksum pyproject.toml | cut -d' ' -f1)
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	rm -f $(VENV)/.bench-* && touch $@

bench: $(BENCH_STAMP) services
ifeq ($(QUICK),1)
	mkdir -p $(BENCH_QUICK_DIR)
	$(BIN)/python -m bench.quick --out $(BENCH_QUICK_DIR)/BENCHMARKS.md
	@echo "quick bench report: $(BENCH_QUICK_DIR)/BENCHMARKS.md"
else
	$(BIN)/python -m bench --store all --out BENCHMARKS.md $(BENCH_ARGS)
	$(BIN)/python -m bench.nats_fanout --postgres --out BENCHMARKS.md
	$(BIN)/python -m bench.aws --out BENCHMARKS.md
	$(BIN)/python -m bench.spark --out BENCHMARKS.md
	$(BIN)/python -m bench.subscribe --out BENCHMARKS.md
	$(BIN)/python -m bench.collector_where --out BENCHMARKS.md
	$(BIN)/python -m bench.gateway --postgres --out BENCHMARKS.md
	$(BIN)/python -m bench.dcb --postgres --out BENCHMARKS.md
	$(BIN)/python -m bench.schedules --postgres --out BENCHMARKS.md
	$(BIN)/python -m bench.compression --out BENCHMARKS.md
	$(BIN)/python -m bench.personal --out BENCHMARKS.md
	$(BIN)/python -m bench.core --out BENCHMARKS.md
	$(BIN)/python -m bench.startup --out BENCHMARKS.md
	$(BIN)/python -m bench.live_types --out BENCHMARKS.md
endif

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
