# Every target is a script in scripts/: CI and people run the same thing.
.PHONY: run up down test lint venv bench

run:            ## fresh clone → venv, migrations, stack, one prediction for resnet18 on local
	@scripts/run.sh

up:             ## start API (port 8000), worker and local agent in the background
	@scripts/up.sh

down:           ## stop them
	@scripts/down.sh

test:           ## lint, type-check and run the tests against real PostgreSQL and Redis
	@scripts/test.sh

lint:
	@scripts/lint.sh

venv:
	@scripts/venv.sh
