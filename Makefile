# inkling.fleet: shortcuts for the commands in README.md (which need no make: a fresh
# Debian 12 has none). Every target installs what it needs (scripts/setup.sh), as root.
SHELL := /bin/bash
export PATH := $(CURDIR)/.venv/bin:$(PATH)
export CONTAINERS_CONF := $(CURDIR)/lab/conf/containers.conf

.PHONY: setup lab-deploy lab-up lab-down test lint sanity unit collection fresh-machine molecule reference

setup:
	bash scripts/setup.sh

## Main job: build and start the lab fleet, then run deploy-inkling.yml against it.
lab-deploy:
	bash scripts/lab-deploy.sh

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
	pytest -q -rs tests/unit

collection: setup
	bash scripts/collection-check.sh

## docs/reference/*.md from the code (a unit test fails when they are stale).
reference: setup
	python scripts/reference.py

fresh-machine:
	bash scripts/fresh-machine.sh

molecule: setup
	bash lab/lab.sh up --services-only
	molecule test --all
