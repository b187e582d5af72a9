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

.PHONY: release test unit lint bench host install base registry clean evidence

host:                      ## Debian packages + a running Docker engine (idempotent)
	bash scripts/ensure-host.sh

$(BIN)/imagesmith: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

install: $(BIN)/imagesmith  ## imagesmith and its test tools in .venv

base: host install         ## the Debian bases examples/local.yaml builds on (debootstrap, once)
	@for os in debian12 debian13; do \
	  docker image inspect imagesmith/debian:$$(case $$os in debian12) echo bookworm;; debian13) echo trixie;; esac) >/dev/null 2>&1 \
	    || $(BIN)/imagesmith base bootstrap --os $$os; \
	done

registry: host             ## the local registry on 127.0.0.1:5000 (htpasswd auth)
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
	  --credentials $(REGISTRY_CREDENTIALS) --signing-key $(SIGNING_KEY) --verifier-key $(VERIFIER_KEY) --trust-policy $(TRUST_POLICY)
	@echo "the evidence of every released digest, signatures checked: make evidence"

evidence: install          ## read back what is attached to every digest of $(OUT)/release.json, signatures checked
	@$(BIN)/python -c 'import json; [print(t["reference"].rsplit(":", 1)[0] + "@" + t["digest"]) for t in json.load(open("$(OUT)/release.json"))["targets"] if t["digest"]]' \
	  | while read -r ref; do $(BIN)/imagesmith evidence "$$ref" --key $(basename $(SIGNING_KEY)).pub --credentials $(REGISTRY_CREDENTIALS) || exit 1; done

# The unit tier: pure tests (tests/unit holds no integration/registry/slurm/gpu test), measured:
# coverage of the imagesmith package under the floor in pyproject.toml ([tool.coverage]) fails it.
UNIT := -m "not integration and not registry and not slurm and not gpu" tests/unit
COVERAGE := --cov=imagesmith --cov-report=term:skip-covered
# pytest's exit code 5 (no tests collected) fails with a message: a suite that runs nothing proves nothing.
define pytest
	@$(BIN)/python -m pytest $(1); code=$$?; \
	  if [ $$code -eq 5 ]; then echo "make: pytest collected no tests" >&2; fi; exit $$code
endef

test: host install lint    ## the whole suite; .ci/run runs exactly this: lint, the unit tier with its coverage floor, the rest
	$(call pytest,-q -ra $(COVERAGE) $(UNIT))
	$(call pytest,-q -ra tests --ignore=tests/unit)

unit: install              ## pure tests only (no engine, no registry), with the coverage floor
	$(call pytest,-q $(COVERAGE) $(UNIT))

lint: install              ## ruff (rules in pyproject.toml) and mypy --strict over the package and the tests
	$(BIN)/ruff check imagesmith tests verify bench
	$(BIN)/python -m mypy

bench: base install        ## build benchmark against a naive Dockerfile; the shared CUDA layer against today's layout (tables)
	$(BIN)/python bench/build.py --matrix $(MATRIX)
	$(BIN)/python bench/cuda_layer.py --matrix $(MATRIX)

clean:
	rm -rf $(OUT) .pytest_cache .mypy_cache
