# Set-up and the two commands of the README. `make demo` and `make test` install first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# On machines without CUDA, pin the CPU wheel: an unpinned torch pulls a multi-GB CUDA build.
TORCH ?= torch==2.13.0

.PHONY: install missing-tools container-tools slurm-tools sandbox-tools sandbox-user slurm-up slurm-down demo test test-quick lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[all,dev]" "$(TORCH)"
	touch $@

# apt waits up to 2 minutes for the dpkg lock another apt holds (unattended upgrades), then
# says so, instead of giving up at once; `install` then lists what is still missing.
APT := apt-get -o DPkg::Lock::Timeout=120

install: $(VENV)/.installed container-tools slurm-tools sandbox-tools sandbox-user
	@$(MAKE) --no-print-directory missing-tools

# What is still missing after `install` (tool:package), and the command to rerun; installs
# nothing (tests/house/test_make_install.py runs it). SBIN: root's tools, off a user's PATH.
SBIN ?= /usr/sbin
missing-tools:
	@missing=""; for t in bwrap:bubblewrap slirp4netns:slirp4netns podman:podman runc:runc \
	    busybox:busybox-static chromium:chromium slurmctld:slurm-wlm munged:munge; do \
	  command -v $${t%%:*} >/dev/null || [ -x $(SBIN)/$${t%%:*} ] \
	    || missing="$$missing $${t#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "install: missing:$$missing (the tests that need them skip, saying so)"; \
	  echo "  as root: $(APT) install -y$$missing, then rerun: make install"; \
	else echo "install: done, nothing missing"; fi

# Local jobs run in a bubblewrap sandbox (issue 25; AIR_SANDBOX=auto runs them without one,
# saying so, where bwrap is missing), with outbound network through slirp4netns in a network
# namespace of their own (issue 37.16; missing, a job has loopback only, saying so) and, as
# root, setpriv (util-linux) to run as AIR_SANDBOX_UID. Installed with apt, as root, when missing.
sandbox-tools:
	@for tool in bwrap:bubblewrap slirp4netns:slirp4netns setpriv:util-linux; do \
	  if ! command -v $${tool%%:*} >/dev/null; then \
	    if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	      apt-get install -y -q $${tool#*:} >/dev/null \
	        || echo "note: apt-get could not install $${tool#*:}"; \
	    fi; \
	  fi; \
	done

# As root, a sandboxed job runs as AIR_SANDBOX_UID, which shares root's caches (an ACL entry):
# by default the uid of this system user of air's own, made here as root when missing (no
# home, no login; its own group). Without it jobs run as 65534 (`nobody`), a uid other daemons
# may share, which `air doctor` warns about. Elsewhere it does nothing.
SANDBOX_USER ?= air-sandbox
sandbox-user:
	@if [ "$$(id -u)" = 0 ] && ! getent passwd $(SANDBOX_USER) >/dev/null; then \
	  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
	    --user-group $(SANDBOX_USER) \
	    || echo "note: useradd could not make the user $(SANDBOX_USER): root's jobs run as 65534"; \
	fi

# Container jobs (issue 16) and their tests need podman, runc and busybox-static; the study
# page's browser tests (issue 27) need chromium (driven by Playwright, no browser download).
# Installed with apt, as root, when missing; elsewhere skipped quietly (those tests then skip,
# saying what is missing).
container-tools:
	@if ! command -v podman >/dev/null || ! command -v runc >/dev/null \
	    || ! command -v busybox >/dev/null || ! command -v chromium >/dev/null; then \
	  if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	    $(APT) install -y -q podman runc busybox-static chromium >/dev/null \
	      || echo "note: apt-get could not install podman runc busybox-static chromium"; \
	  fi; \
	fi

# The Slurm backend's tests (issue 28) run a single-node cluster: slurm-wlm and munge, with apt,
# as root, when missing (the lists refreshed once if the first try fails); elsewhere the Slurm
# tests skip, saying what is missing.
slurm-tools:
	@if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then \
	  if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	    $(APT) install -y -q slurm-wlm munge >/dev/null 2>&1 \
	      || ($(APT) update -q >/dev/null && $(APT) install -y -q slurm-wlm munge >/dev/null) \
	      || echo "note: apt-get could not install slurm-wlm munge"; \
	  fi; \
	fi

# The single-node Slurm cluster the tests use, kept up for `--backend slurm` by hand (root;
# docs/slurm.md): slurm-up prints the SLURM_CONF to export, slurm-down stops it.
slurm-up: slurm-tools
	@$(BIN)/python -m air_skills.testing.slurm_cli up

slurm-down:
	@$(BIN)/python -m air_skills.testing.slurm_cli down

demo: install
	$(BIN)/autoresearch demo

# The suite waits far more than it computes: it runs on TEST_WORKERS pytest-xdist workers
# (3 even on 2 cores), each test isolated; what shares the machine (the Ray head, the Slurm
# cluster, podman) runs on one worker (the scheduler in tests/conftest.py).
TEST_WORKERS ?= 3
PYTEST_PARALLEL := -n $(TEST_WORKERS)

test: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL)

# The inner loop: lint, the import contract, and every test not marked slow.
test-quick: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL) -m "not slow"

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: install
	$(BIN)/pip install -q -e ".[bench]" "$(TORCH)"
	$(BIN)/python bench/launch.py
	$(BIN)/python bench/throughput.py
	$(BIN)/python bench/packing.py
	$(BIN)/python bench/metrics.py
	$(BIN)/python bench/mcp.py
	$(BIN)/python bench/search.py
	$(BIN)/python bench/loop.py

clean:
	rm -rf $(VENV) .pytest_cache
