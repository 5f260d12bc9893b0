# One entry point for people and CI: the same commands locally and in .ci/run.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
UV     := .tools/bin/uv
UV_VERSION := 0.13.9

# Keep Ray on loopback (see docs: Ray otherwise connects through the outside address), keep
# litellm from fetching its price map at import, and keep uv from downloading Pythons.
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER := 0
export LITELLM_LOCAL_MODEL_COST_MAP := True
export RAY_USAGE_STATS_ENABLED := 0
export ARROW_DEFAULT_MEMORY_POOL := jemalloc
export UV_PYTHON_DOWNLOADS := never
# Compile every installed module to bytecode at install time: Python otherwise compiles on each
# import wherever it may not write .pyc files (PYTHONDONTWRITEBYTECODE, read-only images), and the
# driver and every Ray worker paid that again on each run (a 6,000-item run: 35.6 s -> 16.0 s).
export UV_COMPILE_BYTECODE ?= 1

# Idle priority (Linux's SCHED_IDLE: the CPU no other process wants), else the lowest nice.
IDLE := $(shell command -v chrt >/dev/null 2>&1 && echo "chrt --idle 0" || echo "nice -n 19")

.PHONY: install install-llm emulators hooks run score-example test test-unit coverage test-llm check format bench bench-llm soak clean

# The extras `make install` installs; `llm` (a real llama.cpp judge) is built by install-llm.
EXTRAS := --extra dev --extra gcs --extra azure
# llama.cpp built for any x86-64 with AVX2: a native build (-march=native) crashes with a general
# protection fault at the first token on these machines.
LLM_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF

install: $(VENV)/.installed

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet uv==$(UV_VERSION)

$(VENV)/.installed: pyproject.toml uv.lock | $(UV)
	$(UV) sync --locked $(EXTRAS) --python $(PYTHON)
	touch $@

# llama-cpp-python builds from source: 10-20 minutes on 2 cores the first time; uv caches the
# wheel (~/.cache/uv), so later installs take seconds. `make install` removes it again (exact
# sync); this target then reinstalls it from the cache.
install-llm: $(VENV)/.installed-llm

$(VENV)/.installed-llm: $(VENV)/.installed
	CMAKE_ARGS="$(LLM_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
		$(UV) sync --locked $(EXTRAS) --extra llm --python $(PYTHON)
	touch $@

# Azurite (Azure Blob Storage's emulator, for the az:// tests) from tests/emulators' lock file.
# Without npm it says so and installs nothing: the az:// tests then skip, except where
# CTXPREC_REQUIRE_EMULATORS is set (.ci/run sets it), where they fail.
EMULATORS := tests/emulators/node_modules/.installed

emulators: $(EMULATORS)

$(EMULATORS): tests/emulators/package.json tests/emulators/package-lock.json
	@if command -v npm > /dev/null 2>&1; then \
		npm ci --prefix tests/emulators --no-audit --no-fund --loglevel=error && touch $@; \
	else \
		echo "make emulators: npm not found, Azurite not installed (the az:// tests will skip)"; \
	fi

SAMPLE := data/sample.jsonl

$(SAMPLE): $(VENV)/.installed jobs/tools/sample_data.py
	$(BIN)/python -m jobs.tools.sample_data --out $(SAMPLE) --items 2000

run: install $(SAMPLE)
	$(BIN)/python -m jobs.context_precision --config configs/local.yaml

score-example: install
	$(BIN)/ctxprec score examples/item.json

# The real-model tests (marker llm) run when the llm extra is installed and skip otherwise.
# The integration tests over two pytest-xdist workers, each given whole files (a module starts
# its servers once) in the order tests/conftest.py sets, so a worker starts one Ray for the
# files that share it; beside them, at idle priority, the unit tests (no Ray) in two workers,
# which take only the CPU the integration files leave while they wait on servers and
# subprocesses (niced, they slowed the integration files from 333 s to 418 s in .ci/run; see
# docs/benchmarks.md). Their report is printed after theirs. Every test runs in a worker
# process, so a test whose Ray ends its process fails alone and the summary still prints.
# Both parts run, each with its summary.
test: install emulators
	@status=0; $(IDLE) $(BIN)/pytest tests/unit -n 2 > .unit-tests.log 2>&1 & unit=$$!; \
		$(BIN)/pytest tests/integration -n 2 --dist loadfile --no-loadscope-reorder || status=$$?; \
		wait $$unit || status=1; cat .unit-tests.log; exit $$status

# The unit tests alone (no Ray), spread over the cores.
test-unit: install
	$(BIN)/pytest tests/unit -n auto

# The unit tests with a coverage report of jobs/ and scorer_core/ (terminal and htmlcov/).
coverage: install
	$(BIN)/pytest tests/unit -n auto --cov=jobs --cov=scorer_core --cov-report=term:skip-covered \
		--cov-report=html

# pre-commit runs what `make check` runs before each commit (.pre-commit-config.yaml).
hooks: install
	$(BIN)/pre-commit install

test-llm: install-llm
	$(BIN)/pytest -m llm

check: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Each writes its own section of docs/benchmarks.md. Slow (tens of minutes): run on a quiet machine.
# peers_bench makes a throwaway venv with DeepEval and RAGAS outside the repo on first use
# (/tmp/peers-venv; a few minutes, from the registry).
bench: install
	$(BIN)/python -m bench.lexical_agreement
	$(BIN)/python -m bench.calibration
	$(BIN)/python -m bench.aggregate_bench --rows 10000000
	$(BIN)/python -m bench.transport_bench
	$(BIN)/python -m bench.job_bench overhead --items 20000
	$(BIN)/python -m bench.job_bench ratelimit --items 2000 --rpm 600 --workers 4
	$(BIN)/python -m bench.job_bench memory --sizes 10000 100000 1000000 3000000
	$(BIN)/python -m bench.flow_bench --latencies 0.05 0.5 1 3 --seconds 60
	# the longer runs under that section's tables (printed; pasted by hand)
	$(BIN)/python -m bench.flow_bench --latencies 1 3 10 --transports http --seconds 120 --no-write
	$(BIN)/python -m bench.peers_bench --items 6000 --peer-timeout 1200
	$(BIN)/python -m bench.batch_bench --items 100000
	$(BIN)/python -m bench.show_bench --items 20000 1000000
	$(BIN)/python -m bench.phoenix_bench --traces 2000 --memory 10000 100000 1000000

# A real judge (llama.cpp, Gemma 3 270M) on 52 items of ../shared/data (the job) and 20 per
# file (calibrate); writes its section of docs/benchmarks.md. About an hour on 2 cores.
bench-llm: install-llm
	$(BIN)/python -m bench.llama_bench --items 52 --calibrate-items 20

# Fault-injection soak: 20,000 items, every fault on, 4 workers, a rate limit; exits 1 on any
# lost, duplicated or wrong row. Not part of `make test`.
soak: install
	$(BIN)/python -m bench.soak --items 20000 --workers 4 --rpm 6000 --fault-rate 0.2

clean:
	rm -rf $(VENV) .tools tests/emulators/node_modules .mypy_cache .ruff_cache .pytest_cache .import_linter_cache htmlcov .coverage
