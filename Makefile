# imagesmith: the two jobs a new user runs, and their parts.
#   make release   build, verify, tag and push examples/local.yaml to a local registry
#   make test      lint + the test suite (unit with a coverage floor, then integration against a real engine and registry)
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
MATRIX ?= examples/local.yaml
OUT ?= build
JOBS ?= 2
# Folders outside the matrix's own that its paths may name (examples/local.yaml:
# the host's wheel folder and CA bundle); passed as --allow-root.
ALLOW_ROOTS ?= /opt/wheels /etc/ssl/certs
# The local release signs its evidence with this key (made once; the .pub beside it verifies).
SIGNING_KEY ?= .cache/signing/release.key
# The verify stage signs each verification with this key, and the release believes only the verifiers the
# trust policy names (both made once; docs/trust.md says who holds which key).
VERIFIER_KEY ?= .cache/signing/verifier.key
TRUST_POLICY ?= .cache/signing/trust-policy.yaml
REGISTRY_CREDENTIALS := .cache/registry/credentials
# On a host without a GPU, CUDA images are verified in CPU mode and pushed with their immutable
# tag only, marked -not-gpu-verified (never a floating tag); with a GPU they are GPU-verified and
# take floating tags. `make release ALLOW_CPU=` makes a missing GPU fail the release instead.
ALLOW_CPU ?= --allow-cpu-verification
# Each image goes to the local registry's staging repository as soon as it is built (beside the builds still
# running), is verified by that digest, and is released by promotion: the registry mounts the staged blobs, so
# nothing is uploaded twice (docs/ci.md). The repository sits beside examples/local.yaml's own (image.registry and
# image.repository there), so another MATRIX stages nothing unless STAGE names its staging repository;
# `make release STAGE=` pushes from the engine after verification instead.
STAGE ?= $(if $(filter examples/local.yaml,$(MATRIX)),127.0.0.1:5000/imagesmith/local-staging)

.PHONY: release test unit lint lint-and-unit bench host host-release install runtime base registry clean evidence lock lock-tool lock-check lint-outputs docs dist changelog unit-tier integration-tier

host:                      ## Debian packages + a running Docker engine + podman's Docker API (idempotent)
	bash scripts/ensure-host.sh

host-release:              ## what `make release` needs of the host: the engine, debootstrap, a registry, skopeo (idempotent)
	bash scripts/ensure-host.sh --release

# ---- Dependencies: every one pinned with hashes in $(LOCK) (docs/development.md) ------------------
# The lock holds the runtime dependencies, every extra (test, docs, kubernetes, ...) and the build
# backend, for every Python the project supports. uv writes it; uv itself is pinned with hashes in
# $(LOCK_TOOL_LOCK) and lives in its own venv. pip and uv read only PyPI ($(INDEX_URL)) and what is
# written here: the machine's pip configuration and PIP_*/UV_* index settings (local wheel folders,
# local indexes, a constraints file) are ignored, so the lock never records a machine-local URL and
# installs the same on a fresh machine.
LOCK := requirements/lock.txt
# the runtime dependencies and the build backend alone (what `make release` installs), at the lock's versions
RUNTIME_LOCK := requirements/runtime.txt
LOCK_TOOL_IN := requirements/uv.in
LOCK_TOOL_LOCK := requirements/uv.txt
LOCK_TOOL_VENV := .cache/uv
UV := $(LOCK_TOOL_VENV)/bin/uv
INDEX_URL ?= https://pypi.org/simple
# `make lock UPGRADE=ruff` (or UPGRADE="ruff mypy") moves those packages to their newest allowed
# release and keeps every other pin; UPGRADE=all moves everything.
UPGRADE ?=
PIP = env PIP_CONFIG_FILE=/dev/null $(1)/python -m pip --isolated --disable-pip-version-check install -q --index-url $(INDEX_URL) --find-links $(CPU_TORCH_LINKS)
UV_ENV := env -u UV_INDEX -u UV_INDEX_URL -u UV_DEFAULT_INDEX -u UV_EXTRA_INDEX_URL -u UV_FIND_LINKS \
  -u UV_CONSTRAINT -u UV_OVERRIDE -u UV_BUILD_CONSTRAINT -u UV_EXCLUDE_NEWER -u UV_PYTHON -u UV_NO_BINARY -u UV_NO_BUILD
# the oldest Python the lock must install on: pyproject.toml's requires-python (">=3.10" -> 3.10)
LOCK_PYTHON := $(shell sed -n 's/^requires-python *= *">=\([0-9.]*\)".*/\1/p' pyproject.toml)
# torch's CPU build (the payload-test extra) is not on PyPI: its wheel comes from pytorch.org's CPU page, or
# from a folder where this machine keeps it (/opt/wheels on the CI machines). The lock records its version and
# hash only, never where it came from; `make install` reads the same place.
CPU_TORCH_LINKS ?= $(if $(wildcard /opt/wheels/torch-*+cpu-*.whl),/opt/wheels,https://download.pytorch.org/whl/cpu/torch/)
UV_COMPILE = $(UV_ENV) $(UV) pip compile --quiet --no-config --universal --python-version $(or $(LOCK_PYTHON),$(error pyproject.toml: no requires-python = ">=X.Y" line to lock for)) \
  --generate-hashes --index-url $(INDEX_URL) --find-links $(CPU_TORCH_LINKS)
LOCK_INPUTS := pyproject.toml .cache/lock/build-system.in
# requirements/overrides.txt: what the lock leaves out although a dependency names it (the file says why); the
# lock is then complete without it, so `make install` installs exactly the lock's lines (--no-deps).
LOCK_OVERRIDES := requirements/overrides.txt
LOCK_COMPILE = $(UV_COMPILE) --all-extras --override $(LOCK_OVERRIDES) --custom-compile-command 'make lock' $(LOCK_INPUTS)
# the runtime lock: no extra, every version the lock's (--constraint), so it is a subset of the lock
RUNTIME_COMPILE = $(UV_COMPILE) --override $(LOCK_OVERRIDES) --constraint $(1) --custom-compile-command 'make lock' $(LOCK_INPUTS)
# the requirement lines of a lock file (name==version ; markers), without hashes and comments
pins = sed -n 's/^\([A-Za-z0-9][^ ]*==[^\\]*\) *\\\?$$/\1/p' $(1) | sed 's/ *$$//'

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# Two stamps in .venv: every locked package (make install: tests, docs, lint) or the runtime ones alone (make
# release); the whole lock holds the runtime lock, so a full install stamps both.
# The pinned uv installs them (every hash checked, no dependency resolved: the lock's lines exactly), reading only
# PyPI and what is written here, as PIP does: it fetches and unpacks in parallel (5 s for the runtime lock against
# 18 s with pip, on an empty cache).
INSTALLED := $(VENV)/.installed-lock
INSTALLED_RUNTIME := $(VENV)/.installed-runtime
UV_INSTALL = $(UV_ENV) $(UV) pip install --quiet --no-config --python $(BIN)/python --index-url $(INDEX_URL) --find-links $(CPU_TORCH_LINKS)
$(INSTALLED): $(LOCK) pyproject.toml | $(VENV)/bin/python $(UV)
	$(UV_INSTALL) --require-hashes --no-deps -r $(LOCK)
	$(UV_INSTALL) --no-deps --no-build-isolation -e .
	touch $@ $(INSTALLED_RUNTIME)

$(INSTALLED_RUNTIME): $(RUNTIME_LOCK) pyproject.toml | $(VENV)/bin/python $(UV)
	$(UV_INSTALL) --require-hashes --no-deps -r $(RUNTIME_LOCK)
	$(UV_INSTALL) --no-deps --no-build-isolation -e .
	touch $@

install: $(INSTALLED)      ## imagesmith and every locked dependency (tests, docs) in .venv, from $(LOCK)

runtime: $(INSTALLED_RUNTIME)  ## imagesmith and its runtime dependencies alone in .venv, from $(RUNTIME_LOCK) (what make release needs)

$(UV): $(LOCK_TOOL_LOCK)
	$(PYTHON) -m venv $(LOCK_TOOL_VENV)
	$(call PIP,$(LOCK_TOOL_VENV)/bin) --require-hashes -r $(LOCK_TOOL_LOCK)
	touch $@

# The build backend (pyproject.toml [build-system] requires) is locked too: `make install` builds
# the editable imagesmith without build isolation, from locked packages only. An editable build
# with hatchling also needs what hatchling.build.get_requires_for_build_editable() names
# (tests/unit/project/test_tooling.py checks that the lock holds it).
EDITABLE_REQUIRES := editables~=0.3
.cache/lock/build-system.in: pyproject.toml Makefile | $(UV)
	@mkdir -p $(dir $@)
	@$(LOCK_TOOL_VENV)/bin/python -c 'import sys, tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"] + sys.argv[1:]))' $(EDITABLE_REQUIRES) > $@

lock: $(UV) .cache/lock/build-system.in  ## rewrite $(LOCK) from pyproject.toml, keeping every pin it can (UPGRADE=ruff, UPGRADE=all)
	@if grep -q '^<<<<<<< ' $(LOCK) 2>/dev/null; then \
	  echo "make: $(LOCK) has merge conflict markers: starting from HEAD's lock, resolving again from pyproject.toml"; \
	  git show HEAD:$(LOCK) > $(LOCK); fi
	$(LOCK_COMPILE) $(if $(filter all,$(UPGRADE)),--upgrade,$(UPGRADE:%=--upgrade-package %)) -o $(LOCK)
	$(call RUNTIME_COMPILE,$(LOCK)) -o $(RUNTIME_LOCK)
	@echo "$(LOCK) and $(RUNTIME_LOCK) written; commit them with pyproject.toml"

lock-tool: $(UV)            ## rewrite $(LOCK_TOOL_LOCK) (the pinned uv) from $(LOCK_TOOL_IN)
	$(UV_COMPILE) --custom-compile-command 'make lock-tool' $(LOCK_TOOL_IN) -o $(LOCK_TOOL_LOCK)

# Resolves again with the committed pins preferred (nothing is upgraded) and compares the pins:
# a dependency added to, removed from or re-bounded in pyproject.toml without `make lock` fails here.
lock-check: $(UV) .cache/lock/build-system.in  ## fails when pyproject.toml and $(LOCK) disagree (CI runs it first)
	@cp $(LOCK) .cache/lock/check.txt && cp $(RUNTIME_LOCK) .cache/lock/check-runtime.txt && cp $(LOCK_TOOL_LOCK) .cache/lock/check-uv.txt
	@$(LOCK_COMPILE) -o .cache/lock/check.txt
	@$(call RUNTIME_COMPILE,.cache/lock/check.txt) -o .cache/lock/check-runtime.txt
	@$(UV_COMPILE) --custom-compile-command 'make lock-tool' $(LOCK_TOOL_IN) -o .cache/lock/check-uv.txt
	@status=0; \
	for pair in "$(LOCK) .cache/lock/check.txt make lock" "$(RUNTIME_LOCK) .cache/lock/check-runtime.txt make lock" "$(LOCK_TOOL_LOCK) .cache/lock/check-uv.txt make lock-tool"; do \
	  set -- $$pair; \
	  if ! diff -u --label "$$1 (committed)" --label "$$1 (what $${*:3} would write)" <($(call pins,$$1)) <($(call pins,$$2)); then \
	    echo "make: $$1 does not match its inputs (lines above: - locked now, + needed). Run '$${*:3}' and commit $$1." >&2; status=1; \
	  fi; \
	done; \
	[ $$status -eq 0 ] && echo "$(LOCK), $(RUNTIME_LOCK) and $(LOCK_TOOL_LOCK) match pyproject.toml and $(LOCK_TOOL_IN)"; exit $$status

# Both bootstraps at once (each mostly waits on Debian's mirror); each one's failure is reported and fails the target.
base: host-release runtime ## the Debian bases examples/local.yaml builds on (debootstrap, once)
	@pids=""; for os in debian12 debian13; do \
	  docker image inspect imagesmith/debian:$$(case $$os in debian12) echo bookworm;; debian13) echo trixie;; esac) >/dev/null 2>&1 \
	    || { $(BIN)/imagesmith base bootstrap --os $$os & pids="$$pids $$!"; }; \
	done; status=0; for pid in $$pids; do wait $$pid || status=1; done; exit $$status

registry: host-release     ## the local registry on 127.0.0.1:5000 (htpasswd auth)
	bash scripts/local-registry.sh start >/dev/null

$(SIGNING_KEY) $(VERIFIER_KEY): ## an ECDSA P-256 key pair (openssl; cosign import-key-pair reads it)
	mkdir -p $(dir $@)
	(umask 077; openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $@)
	openssl pkey -in $@ -pubout -out $(basename $@).pub

$(TRUST_POLICY): $(VERIFIER_KEY)  ## the local release's trust policy: it believes the local verifier key only
	printf '# imagesmith trust policy (docs/trust.md): the verifiers whose signed verifications a release believes\nversion: 1\nverifiers:\n  - name: local\n    key: %s\n    classes: ["*"]\n' \
	  "$(notdir $(basename $(VERIFIER_KEY))).pub" > $@

release: base registry $(SIGNING_KEY) $(TRUST_POLICY)  ## the main job: render, build, verify (signed), tag, push, attach signed evidence
	$(BIN)/imagesmith build --matrix $(MATRIX) --out $(OUT) --jobs $(JOBS) --push $(ALLOW_CPU) $(ALLOW_ROOTS:%=--allow-root %) \
	  --credentials $(REGISTRY_CREDENTIALS) --signing-key $(SIGNING_KEY) --verifier-key $(VERIFIER_KEY) --trust-policy $(TRUST_POLICY) \
	  $(if $(STAGE),--stage $(STAGE))
	@echo "the evidence of every released digest, signatures checked: make evidence"

evidence: install          ## read back what is attached to every digest of $(OUT)/release.json, signatures checked
	@$(BIN)/python -c 'import json; [print(t["reference"].rsplit(":", 1)[0] + "@" + t["digest"]) for t in json.load(open("$(OUT)/release.json"))["targets"] if t["digest"]]' \
	  | while read -r ref; do $(BIN)/imagesmith evidence "$$ref" --key $(basename $(SIGNING_KEY)).pub --credentials $(REGISTRY_CREDENTIALS) || exit 1; done

# The unit tier: pure tests (tests/unit holds no integration/registry/slurm/gpu/prometheus test), measured:
# coverage of the imagesmith package and the payload (verify/), the sources [tool.coverage.run] names, child
# pythons the tests start included (patch = subprocess), under the floor in pyproject.toml ([tool.coverage]).
# A bare --cov reads the sources from there (--cov=imagesmith would measure the package alone).
# Both tiers run on pytest-xdist workers: the unit tier on every core (TEST_WORKERS; coverage comes back from
# each worker and from the child pythons they start, and the floors below are checked on the combined data),
# the integration tier on three workers (INTEGRATION: much of it waits on networks, registries and containers),
# whole modules, in the groups and order tests/integration/groups.py gives.
TEST_WORKERS ?= auto
UNIT := -n $(TEST_WORKERS) -m "not integration and not registry and not slurm and not gpu and not prometheus and not podman" tests/unit
COVERAGE := --cov --cov-report=term:skip-covered
INTEGRATION := -n 3 --dist loadfile --no-loadscope-reorder --durations=25 tests --ignore=tests/unit
# The imagesmith package alone keeps the floor it had before the payload was counted (pyproject.toml's
# fail_under is the total's, lower: the payload's GPU paths run only on a GPU host).
PACKAGE_COVERAGE_FLOOR := 85
define package_coverage
	@$(BIN)/python -m coverage report --format=total --precision=2 >/dev/null \
	  || { echo "make: total coverage $$($(BIN)/python -m coverage report --format=total --precision=2 --fail-under=0) % is under fail_under in pyproject.toml ([tool.coverage.report])" >&2; exit 1; }
	@total=$$($(BIN)/python -m coverage report --include='imagesmith/*' --format=total --precision=2 --fail-under=0) \
	  && awk -v total="$$total" -v floor=$(PACKAGE_COVERAGE_FLOOR) 'BEGIN { exit !(total + 0 >= floor + 0) }' \
	  || { echo "make: coverage of the imagesmith package is $$total %, under its floor $(PACKAGE_COVERAGE_FLOOR) % (PACKAGE_COVERAGE_FLOOR, Makefile)" >&2; exit 1; }; \
	  echo "coverage of the imagesmith package: $$total % (floor $(PACKAGE_COVERAGE_FLOOR) %)"
endef
# pytest's exit code 5 (no tests collected) fails with a message: a suite that runs nothing proves nothing.
define pytest
	@$(BIN)/python -m pytest $(1); code=$$?; \
	  if [ $$code -eq 5 ]; then echo "make: pytest collected no tests" >&2; fi; exit $$code
endef

# The two tiers side by side (scripts/test-tiers.sh): the integration tier starts first, in the background (its
# first minutes wait on Debian's mirror, PyPI and cold builds), the unit tier runs meanwhile, then the integration
# tier's output follows live; its whole log stays in $(INTEGRATION_LOG).
INTEGRATION_LOG := $(OUT)/integration.log
test: host install         ## the whole suite; .ci/run runs exactly this: lint then the unit tier (coverage floor), side by side with the integration tier
	@bash scripts/test-tiers.sh $(INTEGRATION_LOG) -- $(MAKE) --no-print-directory lint-and-unit -- $(MAKE) --no-print-directory integration-tier

# lint, then the unit tier: both always run (a lint finding does not hide a failing test); the exit code is lint's
# when it failed, else the unit tier's. In `make test` this runs while the integration tier waits on mirrors and builds.
lint-and-unit: install
	@$(MAKE) --no-print-directory lint; lint=$$?; $(MAKE) --no-print-directory unit-tier; unit=$$?; \
	  if [ $$lint -ne 0 ]; then echo "make: lint failed (exit $$lint); the unit tier exit $$unit" >&2; exit $$lint; fi; exit $$unit

unit-tier:
	$(call pytest,-q -ra $(COVERAGE) $(UNIT))
	$(package_coverage)

integration-tier:
	$(call pytest,-q -ra $(INTEGRATION))

unit: install              ## pure tests only (no engine, no registry), with the coverage floor
	$(call pytest,-q $(COVERAGE) $(UNIT))
	$(package_coverage)

lint: install              ## ruff (rules in pyproject.toml), mypy --strict over the package, the tests and the payload (verify/), the import contracts (import-linter)
	$(BIN)/ruff check imagesmith tests verify bench scripts
	$(BIN)/python -m mypy
	$(BIN)/lint-imports --no-cache

# make release's outputs must not change what the linters read: render $(MATRIX) into $(OUT) (build
# contexts with .py files, as `make release` leaves them) and lint again. .ci/run runs it after `make test`.
lint-outputs: install      ## render $(MATRIX) into $(OUT), then `make lint` on the populated tree
	$(BIN)/imagesmith render --matrix $(MATRIX) --out $(OUT) $(ALLOW_ROOTS:%=--allow-root %)
	@find $(OUT) -name '*.py' | grep -q . || { echo "make: $(OUT) holds no .py file after render: this check proves nothing" >&2; exit 1; }
	$(MAKE) --no-print-directory lint

bench: base install        ## build benchmark against a naive Dockerfile; the shared CUDA layer against today's layout (tables)
	$(BIN)/python bench/build.py --matrix $(MATRIX)
	$(BIN)/python bench/cuda_layer.py --matrix $(MATRIX)

# The documentation site: mkdocs, mkdocs-material and mkdocs-click come with `make install` (the lock holds the docs extra).
docs: install              ## the documentation site into site/ (git-ignored): mkdocs build --strict, a broken link or a page missing from nav fails
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# A wheel that works without this repository: hatchling (the locked build backend) puts templates/ and verify/
# inside it (pyproject.toml, force-include); docs/install.md says how to install it, tests/unit/project/test_install.py
# installs it into a fresh venv and runs doctor, plan and render from a folder outside the checkout.
dist: install              ## the wheel and the sdist into dist/ (pip install / pipx install dist/imagesmith-*.whl)
	rm -rf dist
	$(BIN)/python -m hatchling build -d dist
	@ls -l dist

# The changelog: one fragment per change in changes/ (docs/development.md, "The changelog"); this assembles them
# under a version heading in docs/changelog.md and removes them. VERSION defaults to pyproject.toml's.
changelog: install         ## fold changes/*.md into docs/changelog.md under VERSION (default: pyproject.toml's version)
	$(BIN)/python scripts/changelog.py $(if $(VERSION),--version $(VERSION))

clean:
	rm -rf $(OUT) dist site .pytest_cache .mypy_cache .cache/lock
