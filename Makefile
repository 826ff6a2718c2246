# The two commands a new machine needs: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: release run test test-slow lint typecheck imports unit system-deps envtest bench bench-quick bench-plan bench-operator-scale compiled e2e clean version images

# The project's one version, llmsim.__version__ (see hack/version.sh).
VERSION := $(shell hack/version.sh)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Runtime dependencies only.
$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

# Runtime + dev/test + operator dependencies.
$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $@ $(VENV)/.installed-run

run: $(VENV)/.installed-run
	$(BIN)/llmsim serve --host $(HOST) --port $(PORT)

# System packages the tests use for real (promtool, prometheus, etcd, ...).
system-deps:
	hack/system-deps.sh

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check setup.py simulator operator tests bench e2e
	$(BIN)/ruff format --check setup.py simulator operator tests bench e2e

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy
	$(BIN)/mypy --strict tests bench e2e

imports: $(VENV)/.installed-dev
	$(BIN)/lint-imports

# Two pytest workers (pytest-xdist): most integration tests wait on a server or an API server, so
# two workers keep both cores busy. PYTEST_WORKERS=0 runs in one process.
PYTEST_WORKERS ?= 2
PYTEST_XDIST = $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS))

# Everything but the tests marked slow. The assignment fails the recipe when the script fails (an
# `export X=$$(...)` would not).
test: lint typecheck imports system-deps
	assets="$$(hack/envtest-assets.sh)" && KUBEBUILDER_ASSETS="$$assets" \
		$(BIN)/pytest -m "not slow" $(PYTEST_XDIST) $(PYTEST_ARGS)

# The slow set, which CI runs after make test: the planner core compiled with mypyc (minutes on two
# cores) and the long property runs.
test-slow: $(VENV)/.installed-dev
	$(BIN)/pytest -m slow $(PYTEST_ARGS)

# Quick loop while developing: no system services.
unit: $(VENV)/.installed-dev
	$(BIN)/pytest -m "not integration and not kube and not prometheus and not slow" $(PYTEST_XDIST) $(PYTEST_ARGS)

envtest:
	@hack/envtest-assets.sh

# The product on a real cluster: the one KUBECONFIG reaches, else kind (with Docker), else this
# machine's local Kubernetes from the shared k8s scripts. Images from our Dockerfiles, the operator
# and the chart from the release's install.yaml and chart archive (hack/release.sh), a LiteLLM gateway
# and a Prometheus; see e2e/run.sh and docs/operator.md.
e2e: $(VENV)/.installed-dev system-deps
	e2e/run.sh $(PYTEST_ARGS)

# Every benchmark in bench/, then the experiments E1-E8 (tens of minutes; each writes
# bench/results/<name>.json). bench-quick runs each at its smallest setting, to check they run.
bench: $(VENV)/.installed-dev
	$(BIN)/python bench/run_all.py $(BENCH_ARGS)

bench-quick: $(VENV)/.installed-dev
	$(BIN)/python bench/run_all.py --quick $(BENCH_ARGS)

# The operator at SCALE LLMSimulators on this machine's local cluster (about 10 minutes at 1,000;
# docs/operator.md, "The operator at scale"; figures in bench/results/operator_scale_$(SCALE).json).
SCALE ?= 1000
bench-operator-scale: $(VENV)/.installed-dev
	scripts="$$(hack/k8s-scripts.sh)" && "$$scripts/cluster-up.sh" \
		&& { "$$scripts/build-image.sh" . Dockerfile.operator llmsim-operator:scale || [ $$? = 5 ]; } \
		&& KUBECONFIG=/tmp/k8s-run/kubeconfig $(BIN)/python bench/bench_operator_fleet.py \
			--scale $(SCALE) --install llmsim-operator:scale $(BENCH_ARGS)

# The planner core compiled with mypyc (setup.py, LLMSIM_COMPILE=1) in a copy: build/compiled.
compiled: $(VENV)/.installed-dev
	hack/compile-core.sh

# llmsim plan's speed: the compiled core against pure Python in one run (same results checked).
bench-plan: compiled
	PYTHONPATH=build/compiled/simulator $(BIN)/python bench/bench_plan.py --baseline . $(BENCH_ARGS)

version:
	@echo $(VERSION)

# Both images, tagged and labelled (org.opencontainers.image.version) with the version.
images:
	docker build --build-arg VERSION=$(VERSION) -t llmsim:$(VERSION) -f Dockerfile .
	docker build --build-arg VERSION=$(VERSION) -t llmsim-operator:$(VERSION) -f Dockerfile.operator .

# Every artifact of a release into dist/: both images (OCI archives), sdist, wheel and the compiled
# wheel, install.yaml, the Helm chart, SHA256SUMS. Refuses a VERSION other than the code's and a tree
# with uncommitted changes (hack/release.sh; docs/releasing.md). Tagging vX.Y.Z runs it in CI
# (.github/workflows/release.yml), which publishes the result.
release: $(VENV)/.installed-dev
	rm -rf dist
	PYTHON=$(BIN)/python hack/release.sh $(VERSION) dist

clean:
	rm -rf $(VENV) build dist .mypy_cache .ruff_cache .pytest_cache

# Every file derived from the code (models.yml's JSON Schema for the operator, the CRD in crds/ and the
# chart, deploy/llmsim-operator.yaml); tests/test_generated.py fails until they match.
.PHONY: generate
generate: $(VENV)/.installed-dev
	$(BIN)/python hack/generate.py
