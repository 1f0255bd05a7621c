# `make serve`: set up and serve the bundled model on http://127.0.0.1:8000/v1 (pass flags with ARGS="...").
# `make test`: set up and run the whole test suite (pass pytest flags with PYTEST_ARGS="...").
# `make bench`: ours vs vLLM's server vs raw AsyncLLM in alternating rounds, the agent workload, render stability, the frontend's ceiling and the pipeline cost; then prefix-cache affinity across two replicas, long agent sessions' per-turn cost before and after incremental prompts, retrieval quality on the real embedding model, the agent workload on a fleet of two workers against the embedded engine and SGLang's gateway, a short turn's CPU beside vLLM's own frontend (with a profile) and the floors under it, and a batch beside interactive agents (after setup).
# `make profile`: py-spy's flame graph of the per-token pipeline (bench/results/pipeline-profile.svg).
# `make docs`: build the docs site (build/docs-site, served at /guide/) in strict mode; setup does this too.
# `make screenshots`: the console's browser tests, saving a screenshot of each page to docs/images/.
# `make fuzz`: 10,000 fuzz cases against the API (CASES=N for another count); prints the counts.
VENV ?= .venv

.PHONY: setup serve test bench fuzz profile docs screenshots
CASES ?= 10000
TEST_WORKERS ?= 0  # pytest-xdist workers for `make test`: 0 runs it in one process (tests/conftest.py groups the tests)

setup:
	@bash scripts/setup.sh

serve: setup
	$(VENV)/bin/responses-server $(ARGS)

test: setup
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadscope $(PYTEST_ARGS)

bench: setup
	$(VENV)/bin/python bench/serving.py $(ARGS)
	$(VENV)/bin/python bench/affinity.py
	$(VENV)/bin/python bench/long_sessions.py
	$(VENV)/bin/python bench/retrieval.py
	$(VENV)/bin/python bench/fleet.py
	$(VENV)/bin/python bench/turn_cost.py --profile
	$(VENV)/bin/python bench/turn_floor.py
	$(VENV)/bin/python bench/batches.py

profile: setup
	$(VENV)/bin/py-spy record --rate 250 -o bench/results/pipeline-profile.svg -- $(VENV)/bin/python bench/pipeline.py --repeats 10

fuzz: setup
	$(VENV)/bin/python -m tests.fuzz --cases $(CASES)

docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir build/docs-site

screenshots: setup
	CONSOLE_SCREENSHOTS=docs/images $(VENV)/bin/python -m pytest tests/e2e_one_server/test_e2e_console.py $(PYTEST_ARGS)
