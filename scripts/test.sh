#!/usr/bin/env bash
# The test command: lint and format checks, a dry run of the default grid, then pytest
# (unit, integration, workflow). Extra arguments go to pytest, e.g. `-m unit`.
# `--fast` first: only the fast tier (below).
source "$(dirname "$0")/bootstrap.sh"
# pytest keeps the test modules it rewrote (their assertions) as bytecode beside them, unless
# PYTHONDONTWRITEBYTECODE is set: then each worker rewrites all 97 at every start (~20 s).
unset PYTHONDONTWRITEBYTECODE
# The fast tier, for the edit loop (under 3 minutes on 2 cores): the unit tests but the slow ones
# (figures inspected, simulations, subprocesses), no lint and no dry run. CI runs the full suite.
if [ "${1:-}" = "--fast" ]; then
    shift
    echo "== pytest -n 2 tests/unit -m \"not slow\" (the fast tier; the full suite: without --fast)"
    exec pytest -n 2 -m "not slow" tests/unit "$@"
fi
# Another torch than the lock's: `--torch 2.11` builds .venv-torch-2.11 (the lock's packages but
# torch at that version, with the torchvision made for it and torch's own dependencies at the
# versions it asks for) and runs the tests of the strategies
# there: each one equal to single, the sharded ones, the precisions and optimizers, the GPT.
if [ "${1:-}" = "--torch" ]; then
    version="${2:?--torch needs a version, e.g. --torch 2.11}"
    shift 2
    env=".venv-torch-$version"
    [ -x "$env/bin/python" ] || uv venv --quiet --python .venv/bin/python "$env"
    uv export --locked --quiet --no-hashes --no-annotate --no-emit-project --all-groups \
        | grep -v -E '^(torch|torchvision|triton|nvidia-|cuda-|setuptools|sympy|mpmath|networkx|filelock|fsspec|typing-extensions)' \
        > "$env/others.txt"
    echo "== $env: torch==$version.* (a few minutes, several GB, the first time)"
    uv pip install --quiet --python "$env/bin/python" -r "$env/others.txt" "torch==$version.*" torchvision -e .
    "$env/bin/python" -m compileall -q src >/dev/null
    echo "== pytest on torch $("$env/bin/python" -c 'import torch; print(torch.__version__)')"
    exec "$env/bin/python" -m pytest -n 2 -p no:cacheprovider tests/unit/test_strategies.py \
        tests/integration/test_exact_strategies.py tests/integration/test_approx_strategies.py \
        tests/integration/test_training_options.py tests/integration/test_language_model.py \
        tests/integration/test_compile.py tests/unit/test_transforms.py "$@"
fi
# The report tests open the HTML in headless Chromium, compile the PDF with latexmk and
# render its pages with pdftoppm (poppler-utils) to find blank ones. Install them where we
# can (root with apt, about a minute once); elsewhere those tests skip and say why.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
    && ! { command -v chromium && command -v latexmk && command -v pdftoppm; } >/dev/null 2>&1; then
    echo "== apt-get install chromium texlive-latex-recommended latexmk poppler-utils"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        chromium texlive-latex-recommended latexmk poppler-utils >/dev/null
fi
echo "== snakemake --lint"
snakemake --lint
echo "== snakefmt --check"
snakefmt --check Snakefile workflow/rules
echo "== snakemake -n (config.yaml)"
snakemake -n --quiet rules
# The SLURM test starts a one-node cluster on localhost from Debian's packages (about a
# minute): part of the run wherever they install (root with apt), skipped elsewhere.
# The container and multi-node tests stay on request (make container / multinode-test).
selection="not container and not multinode and not slurm"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    selection="not container and not multinode"
fi
# Two workers (pytest-xdist): half the suite's time is spent waiting (Snakemake's scheduler, a
# hang's timeout, SLURM), so two keep both cores busy; more only add contention (docs/testing.md).
# The integration tests run one at a time, a module stays on one worker (tests/conftest.py). The 25 slowest and
# the time per part and file are printed at the end. `-n 0` as an argument runs serially.
echo "== pytest -n 2 -m \"$selection\""
pytest -n 2 --durations=25 -m "$selection" "$@"
