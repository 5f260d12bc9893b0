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
export UV_PYTHON_DOWNLOADS := never

.PHONY: install run score-example test check format bench soak clean

install: $(VENV)/.installed

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet uv==$(UV_VERSION)

$(VENV)/.installed: pyproject.toml uv.lock | $(UV)
	$(UV) sync --locked --all-extras --python $(PYTHON)
	touch $@

SAMPLE := data/sample.jsonl

$(SAMPLE): $(VENV)/.installed jobs/sample_data.py
	$(BIN)/python -m jobs.sample_data --out $(SAMPLE) --items 2000

run: install $(SAMPLE)
	$(BIN)/python -m jobs.context_precision --config configs/local.yaml

score-example: install
	$(BIN)/ctxprec score examples/item.json

test: install
	$(BIN)/pytest

check: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: install
	$(BIN)/python -m bench.lexical_agreement
	$(BIN)/python -m bench.aggregate_bench

soak: install
	$(BIN)/pytest -m soak -p no:cacheprovider

clean:
	rm -rf $(VENV) .tools .mypy_cache .ruff_cache .pytest_cache
