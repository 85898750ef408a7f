# Set-up is part of every target: a fresh machine needs only `make demo` or `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install sshd test lint demo bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $@

# The SSH tests start a real sshd on 127.0.0.1; install Debian's openssh-server when it is missing.
sshd:
	@test -x /usr/sbin/sshd || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends openssh-server >/dev/null; }

install: $(STAMP) sshd

lint: $(STAMP)
	$(BIN)/ruff check .

test: install lint
	$(BIN)/python -m pytest -q

demo: install
	$(BIN)/aidai demo

bench: install
	$(BIN)/python -m eval.bench_checks

clean:
	rm -rf $(VENV) demo-host
