# Magnetar — the two commands that set up a fresh machine: `make run` and `make test`.
# Everything a test needs is installed here; nothing is expected to be installed by hand.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: run test venv run-venv zookeeper lint typecheck pytest helm-check sim-long chaos chaos-long dev-cluster \
	bench bench-bookie-storage bench-peers bench-compare bench-ab clean

ARGS ?=

## run: install the package and what it needs to run (no test, Spark or Helm packages) and start
## `magnetar standalone` on http://127.0.0.1:8080; flags go in ARGS, e.g. make run ARGS="--http-port 8081"
run: run-venv
	$(BIN)/magnetar standalone$(if $(ARGS), $(ARGS))

## test: install everything the tests need, then lint, type-check and run the whole suite
test: zookeeper venv lint typecheck pytest

# Both share .venv: `make run` installs the package with its runtime dependencies only ($(RUN_STAMP)),
# `make test` adds the dev, spark and helm extras ($(STAMP)), which includes everything `make run` needs. So
# `make run` after `make test` installs nothing, and `make test` after `make run` adds only the extras.
RUN_STAMP := $(VENV)/.installed-run
EDITABLE := --config-settings editable_mode=strict

## venv: the full development environment (every extra)
venv: $(STAMP)
	$(relink)

run-venv: $(RUN_STAMP)
	$(relink)

# The strict editable install links each module file; re-link when modules are added or removed.
MODULES := $(shell find admin bookkeeper broker gc managed_ledger -name '*.py' 2>/dev/null | sort)
define relink
	@echo "$(MODULES)" | cmp -s - $(VENV)/.modules 2>/dev/null || { \
		$(BIN)/python -m pip install --quiet --no-deps -e . $(EDITABLE) \
			> $(VENV)/relink.log 2>&1 || { cat $(VENV)/relink.log; exit 1; }; \
		echo "$(MODULES)" > $(VENV)/.modules; }
endef

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/python -m pip install --quiet -e '.[dev,spark,helm]' $(EDITABLE)
	@echo "$(MODULES)" > $(VENV)/.modules
	touch $(STAMP) $(RUN_STAMP)

$(RUN_STAMP): pyproject.toml
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then touch $@; else \
		set -e; \
		test -x $(BIN)/python || $(PYTHON) -m venv $(VENV); \
		echo "installing magnetar and its runtime dependencies into $(VENV)"; \
		$(BIN)/python -m pip install --quiet -e . $(EDITABLE); \
		echo "$(MODULES)" > $(VENV)/.modules; \
		touch $@; \
	fi

## zookeeper: ZooKeeper from Debian, for the metadata-store and cluster tests
zookeeper:
	@if [ ! -f /usr/share/java/zookeeper.jar ]; then \
		echo "installing ZooKeeper from Debian"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq zookeeper; \
	fi

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy
	cd tests && ../$(BIN)/mypy --config-file ../pyproject.toml bench/compare.py bench/comparison bench/fixed_rate_cpu.py \
		bench/ab_standalone.py bench/ab_stats.py bench/ab_report.py

# Two parts, both on PYTEST_WORKERS pytest-xdist workers: first the CPU-bound tests (no processes, no timing),
# spread test by test; then the rest - real process clusters, the failure suite, end-to-end tests - spread
# module by module (--dist loadfile: a module's processes and fixtures stay on one worker). The second part
# mostly waits on processes and timers (about 1.4 of 2 cores busy), so two modules at once take 1,014 s
# where one at a time took about 1,500 s (tests/bench/RESULTS.md); their bounds are for hangs, not speed.
# PYTEST_SERIAL_WORKERS=0 runs the second part in one process. Both parts always run; the target fails if
# either failed.
PYTEST_PARALLEL := tests/unit tests/sim
PYTEST_WORKERS ?= 2
PYTEST_SERIAL_WORKERS ?= $(PYTEST_WORKERS)
pytest: venv
	@status=0; \
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) $(PYTEST_PARALLEL) $(PYTEST_ARGS) || status=$$?; \
	$(BIN)/python -m pytest -n $(PYTEST_SERIAL_WORKERS) --dist loadfile $(addprefix --ignore=,$(PYTEST_PARALLEL)) \
		$(PYTEST_ARGS) || status=$$?; \
	exit $$status

## helm-check: the Helm chart's offline checks (yamllint, helm lint, render, Kubernetes schema validation)
helm-check: venv
	$(BIN)/yamllint -s -c helm/.yamllint helm
	$(BIN)/python -m pytest tests/helm -q

## sim-long: thousands of seeds of the deterministic simulations (replication, managed ledger, topic)
sim-long: venv
	$(BIN)/python -m pytest tests/sim --sim-seeds=5000 -q --timeout=0

## chaos: the failure suite's short scenarios on a real local cluster (part of `make test` too)
chaos: zookeeper venv
	$(BIN)/python -m pytest tests/chaos -q -s

## chaos-long: the failure suite's long scenarios (more fault rounds, longer faults; about 10 minutes)
chaos-long: zookeeper venv
	$(BIN)/python -m pytest tests/chaos -q -s --chaos-long

## dev-cluster: ZooKeeper, 3 bookies and 2 brokers as processes under ./dev-cluster until Ctrl-C
dev-cluster: zookeeper venv
	$(BIN)/magnetar dev-cluster --zk 1 --bookies 3 --brokers 2 --data-dir dev-cluster

## bench-bookie-storage: the storage-engine benchmark (figures go to tests/bench/RESULTS.md by hand)
bench-bookie-storage: venv
	$(BIN)/magnetar perf bookie-storage

## bench-peers: the servers and clients Magnetar is compared with (Debian: redis-server, nats-server,
## rabbitmq-server; PyPI: the `bench` extra). Not needed by `make test`. The comparison runs its own
## instances on free loopback ports; it does not use services a package may have started.
BENCH_DEBS := redis-server nats-server rabbitmq-server
bench-peers: zookeeper venv
	@missing=""; for p in $(BENCH_DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing from Debian:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	$(BIN)/python -m pip install --quiet -e '.[dev,spark,helm,bench]' --config-settings editable_mode=strict \
		> $(VENV)/bench-install.log 2>&1 || { cat $(VENV)/bench-install.log; exit 1; }

## bench-compare: Magnetar side by side with Redis, NATS, RabbitMQ and pulsar-lite on this machine (about 30
## minutes; figures appended to tests/bench/RESULTS.md). COMPARE_ARGS=--quick for a short run.
COMPARE_ARGS ?=
bench-compare: bench-peers
	$(BIN)/python tests/bench/compare.py $(COMPARE_ARGS)

## bench-ab: the data path's guard - interleaved A/B of the standalone's cost per message, per phase (produce
## and consume, JSON and binary), of the working tree (or NEW=<rev>) against OLD=<rev>, with an A/A control
## and the smallest effect the run can detect: instructions per message where `perf stat` counts them, else
## CPU time. Each revision is checked out and installed in its own venv under .bench/ab/ (reused). PAIRS=12
## by default (2 x PAIRS rounds of about 20-40 s each); AB_ARGS=--markdown prints a RESULTS.md entry. Not part
## of `make test`. Example: make bench-ab OLD=288a165 PAIRS=20. AB_ARGS="--latency 5000": the publish
## latency p99 at 5,000 msgs/s instead of the cost per message.
AB_ARGS ?=
ifneq ($(filter bench-ab,$(MAKECMDGOALS)),)
ifeq ($(strip $(OLD)),)
$(error make bench-ab needs OLD=<rev>, the earlier revision to compare with (e.g. make bench-ab OLD=288a165))
endif
endif
AB_MAKE_COMMAND = make bench-ab OLD=$(OLD)$(if $(NEW), NEW=$(NEW))$(if $(PAIRS), PAIRS=$(PAIRS))$(if \
	$(AB_ARGS), AB_ARGS="$(AB_ARGS)")
bench-ab: venv
	$(BIN)/python tests/bench/ab_standalone.py --old '$(OLD)'$(if $(NEW), --new '$(NEW)')$(if $(PAIRS), \
		--pairs $(PAIRS)) $(AB_ARGS) --make-command '$(AB_MAKE_COMMAND)'

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .pytest_cache .ruff_cache

