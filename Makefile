# Set-up is part of every target: a fresh machine needs only `make demo` or `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_INCIDENTS ?= ../shared/eval/dev_incidents.jsonl
BENCH_OUT ?= eval/results/diagnosis
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install test-services sshd chromium postgres prometheus slurm test test-llm lint demo bench eval clean bench-diagnosis \
	bench-l4 bench-reveal lab iptables \
	bench-kaiops bench-history bench-server bench-hosts bench-fanout

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m agent.knowledge.embeddings
	@touch $@

# The SSH tests start a real sshd on 127.0.0.1; install Debian's openssh-server when it is missing.
sshd:
	@test -x /usr/sbin/sshd || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends openssh-server >/dev/null; }

# The web page test drives Debian's chromium headless through Debian's chromedriver (Selenium); no browser download.
chromium:
	@{ command -v chromium && command -v chromedriver; } >/dev/null || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null; }

# The team checkpoint store's tests start a throwaway PostgreSQL cluster on 127.0.0.1 (Debian's postgresql).
postgres:
	@ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends postgresql >/dev/null; }

# The Prometheus tests start Debian's prometheus binary on 127.0.0.1 with their own config and TSDB (the package's
# service is not used; a machine without systemd does not start it).
prometheus:
	@command -v prometheus >/dev/null || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

# The Slurm tests start munged, slurmctld and four slurmd on 127.0.0.1, all in a temp dir (Debian's slurm-wlm, munge).
slurm:
	@{ test -x /usr/sbin/slurmctld && test -x /usr/sbin/slurmd && test -x /usr/sbin/munged && command -v scontrol; } \
		>/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
		--no-install-recommends slurmctld slurmd slurm-client munge >/dev/null; }

install: $(STAMP)

# Real servers the tests start on loopback (Debian packages, installed when missing).
test-services: sshd chromium postgres prometheus slurm

lint: $(STAMP)
	$(BIN)/ruff check .

test: install test-services lint
	$(BIN)/python -m pytest -q -m "not llm_server"

# The openai reasoner against a real model served by llama-cpp-python on loopback (compiles llama.cpp: ~10 min).
test-llm: install test-services
	$(BIN)/python -m pip install -q -e '.[dev,llm-server]'
	$(BIN)/python -m pytest -q -m llm_server -s

demo: install
	$(BIN)/aidai demo

bench: install bench-diagnosis bench-hosts bench-l4 bench-reveal bench-kaiops bench-history bench-server bench-fanout
	$(BIN)/python -m eval.bench_checks
	$(BIN)/python -m eval.bench_safety
	$(BIN)/python -m eval.bench_tickets --incidents $(DEV_INCIDENTS)
	$(BIN)/python -m eval.bench_cold --runs 3 --before-commit 83d19f7 --out eval/results/cold.md

# Real hosts: `aidai diagnose --host local` on every dev incident text on this machine, unreachable hosts, and every
# shipped profile healthy (nothing may be confirmed) and faulty (the right leaf). Tables in eval/results/hosts.md.
bench-hosts: install
	$(BIN)/python -m eval.bench_hosts --incidents $(DEV_INCIDENTS) --out eval/results/hosts.md

# Fan-out: one passive-check round (inventory + preflight's five checks) over 64 and 256 simulated hosts, locally
# and each over its own SSH connection to a real sshd on 127.0.0.1, for several limits on the hosts checked at once
# (wall, CPU of this process and its children). Tables in eval/results/fanout.md (~1 h on 2 cores).
bench-fanout: install sshd
	$(BIN)/python -m eval.bench_fanout --hosts 64 --limits 8 16 32 64 --out eval/results/fanout.md
	$(BIN)/python -m eval.bench_fanout --hosts 256 --limits 8 16 32 --out eval/results/fanout.md --append

# L4 log localizer: throughput vs plain Drain3, Loghub grouping accuracy (research-only data, read in place),
# 200 simulated faulty jobs, broken files. Tables in eval/results/l4.md.
LOGHUB ?= ../shared/fixtures/real/loghub
bench-l4: install
	$(BIN)/python -m eval.bench_l4 --loghub $(LOGHUB)

# The fault lab (eval/lab/): real torchrun/gloo jobs on 2-8 "nodes" (own UTS namespace, hostname and 127.0.X.Y in one
# network namespace per job), one real fault each, then L4 judged on them (eval/results/l4-lab.md). Root only (it
# creates namespaces, mounts, cgroups, iptables rules); about 45 s a job on 2 cores. LAB_SEEDS x 12 jobs.
LAB_SEEDS ?= 101 102 103 104 105 106 107 108 109 110
LAB_OUT ?= ../lab-jobs
iptables:
	@command -v iptables >/dev/null || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends iptables >/dev/null; }

lab: install iptables
	for s in $(LAB_SEEDS); do timeout 2400 $(BIN)/python -m eval.lab.run --out $(LAB_OUT) --seed $$s --jobs 12 || exit 1; done
	$(BIN)/python -m eval.l4.lab $(LAB_OUT) --out eval/results/l4-lab.md --title "Fault lab, seeds $(LAB_SEEDS)"

# Reveal on the real Exathlon traces (clean false-positive rate, injected anomalies), collector overhead,
# preflight on simulated hosts. Tables in eval/results/reveal.md.
bench-reveal: install
	$(BIN)/python -m eval.bench_reveal --out eval/results/reveal.md

# Diagnosis on the dev incidents (../shared/eval/dev_incidents.jsonl): ours only, history = the seed DB.
eval: install
	$(BIN)/aidai eval --incidents $(DEV_INCIDENTS) --method aidai --out $(BENCH_OUT) --tag aidai-seed

# KAIOPS: held-out generated tasks, KAIOPS vs DT/RF and the modality ablations (eval/results/kaiops.md).
bench-kaiops: install
	$(BIN)/python -m eval.bench_kaiops --seed 1000 --tasks 10000 --out eval/results/kaiops.md

# Offline phase on the dev incidents: taxonomy built from the records vs shipped, feedback loop (eval/results/history.md).
bench-history: install
	$(BIN)/python -m eval.bench_history

# aidai serve under load: 20 concurrent diagnoses through the API (eval/results/server.md, ~2 min).
bench-server: install
	$(BIN)/python -m eval.bench_server --runs 20 --workers 4 --out eval/results/server.md

clean:
	rm -rf $(VENV) demo-host

# Diagnosis benchmark (AidAI §6): the five methods on the dev incidents with the seed DB and with empty history,
# leave-one-out for aidai (the other dev incidents are the history) and unseen labels (AidAI Table 4).
# Tables and metrics.json in eval/results/diagnosis/.
BENCH_METHODS := --method aidai --method rcacopilot --method tgd --method did --method cvd
UNSEEN_LABELS := --remove-label GPU.MEMORY.UNCORRECTABLE_ECC --remove-label INTERCONNECT_NETWORKING.SOCKET.IFNAME_MISCONFIG \
	--remove-label INTERCONNECT_NETWORKING.PCIE.ACS_P2P_HANG

# A realistic fleet (eval/CONFOUND.md): views, latent faults and multi-node jobs drawn per record for seeds 1-3
# (files confound-1..3), the seed-1 fleet without the causes (controls-1: nothing should be confirmed), and the
# public incidents of eval/incidents/ (real threads the code was not tuned on) in the seed-1 fleet; then the claim
# model's fit and reliability (eval/attribution_fit.py: fitted on the dev runs, judged on the public ones).
PUBLIC_INCIDENTS ?= eval/incidents/public.jsonl
CONFOUND_METHODS := --method aidai --method tgd --method cvd

bench-diagnosis: install
	$(BIN)/aidai eval --incidents $(DEV_INCIDENTS) $(BENCH_METHODS) --out $(BENCH_OUT) --tag seed
	$(BIN)/aidai eval --incidents $(DEV_INCIDENTS) $(BENCH_METHODS) --no-seed --out $(BENCH_OUT) --tag no-history
	$(BIN)/aidai eval --incidents $(DEV_INCIDENTS) --method aidai --no-seed --leave-one-out --out $(BENCH_OUT) \
		--tag leave-one-out
	$(BIN)/aidai eval --incidents $(DEV_INCIDENTS) --method aidai $(UNSEEN_LABELS) --out $(BENCH_OUT) --tag unseen
	$(BIN)/aidai eval --incidents $(DEV_INCIDENTS) $(CONFOUND_METHODS) --confound 1,2,3 --trace --out $(BENCH_OUT) \
		--tag confound
	$(BIN)/aidai eval --incidents $(DEV_INCIDENTS) $(CONFOUND_METHODS) --confound 1 --controls --trace --out $(BENCH_OUT) \
		--tag controls-1
	$(BIN)/aidai eval --incidents $(PUBLIC_INCIDENTS) $(CONFOUND_METHODS) --confound 1 --trace --out $(BENCH_OUT) \
		--tag public-confound-1
	$(BIN)/aidai eval --incidents $(PUBLIC_INCIDENTS) --method aidai --method tgd --confound 1 --controls --trace \
		--out $(BENCH_OUT) --tag public-controls-1
	$(BIN)/python -m eval.attribution_fit --incidents $(DEV_INCIDENTS) --rows $(BENCH_OUT)/confound-1.rows.jsonl \
		$(BENCH_OUT)/confound-2.rows.jsonl $(BENCH_OUT)/confound-3.rows.jsonl \
		--controls $(BENCH_OUT)/controls-1.rows.jsonl --judge $(BENCH_OUT)/public-confound-1.rows.jsonl \
		--judge-controls $(BENCH_OUT)/public-controls-1.rows.jsonl --judge-incidents $(PUBLIC_INCIDENTS) \
		--out $(BENCH_OUT)/attribution.md
