# inkling.fleet: the commands in README.md. Every target installs what it needs
# (scripts/setup.sh) on a fresh Debian 12 machine, as root.
SHELL := /bin/bash
export PATH := $(CURDIR)/.venv/bin:$(PATH)
export CONTAINERS_CONF := $(CURDIR)/lab/conf/containers.conf

.PHONY: setup lab-deploy lab-up lab-down test lint sanity unit molecule

setup:
	bash scripts/setup.sh

## Main job: build and start the lab fleet, then run deploy-inkling.yml against it.
lab-deploy: setup
	bash lab/lab.sh up
	ansible-playbook -i inventory/lab deploy-inkling.yml

lab-up: setup
	bash lab/lab.sh up

lab-down:
	bash lab/lab.sh down

## All tests (what CI runs): lint, sanity, unit tests, molecule scenarios.
test:
	bash scripts/test.sh

lint: setup
	yamllint -s . && ansible-lint --offline

sanity: setup
	bash scripts/sanity.sh

unit: setup
	pytest -q tests/unit

molecule: setup
	bash lab/lab.sh up --services-only
	molecule test --all
