# The two commands a newcomer needs:  make demo   and   make test
# Everything installs from this repo's files into .venv (Python 3.11 required).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: venv demo test lint e2e clean stop-demo

$(VENV)/.installed: requirements.txt requirements-dev.txt constraints.txt pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "recforge needs Python 3.11"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check uv==0.13.9
	$(BIN)/uv pip install -q --python $(BIN)/python -r requirements-dev.txt -c constraints.txt -e .
	touch $@

venv: $(VENV)/.installed

## make demo: local S3 server + sample data + the real DAG via `airflow dags test`
demo: venv
	$(BIN)/recforge demo

stop-demo:
	-$(BIN)/recforge dev-s3 stop --state-dir .demo

## make test: lint + the whole test suite (unit, S3 integration, MXNet readers, DAG e2e, Celery)
test: venv
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

clean: stop-demo
	rm -rf $(VENV) .airflow .demo
