# Set-up is part of every target: a fresh machine needs only `make demo` or `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install sshd test test-llm lint demo bench eval clean

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
	$(BIN)/python -m pytest -q -m "not llm_server"

# The openai reasoner against a real model served by llama-cpp-python on loopback (compiles llama.cpp: ~10 min).
test-llm: install
	$(BIN)/python -m pip install -q -e '.[dev,llm]'
	$(BIN)/python -m pytest -q -m llm_server -s

demo: install
	$(BIN)/aidai demo

bench: install eval
	$(BIN)/python -m eval.bench_checks

# Diagnosis accuracy and speed on the dev incidents (../shared/eval/dev_incidents.jsonl).
eval: install
	$(BIN)/python -m eval.dev_eval --out eval/results/dev_offline.md

clean:
	rm -rf $(VENV) demo-host
