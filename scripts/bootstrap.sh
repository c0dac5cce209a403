# Sourced by scripts/main.sh and scripts/test.sh: from a machine with only Python 3.11
# and pip, install the pinned uv and build .venv from uv.lock (exact versions, no drift).
set -euo pipefail
UV_VERSION=0.13.9
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v uv >/dev/null 2>&1 || [ "$(uv --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
    python3 -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
    export PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$(python3 -m site --user-base)/bin:$PATH"
fi
# Compiled bytecode: every rank imports torch, and without .pyc files (or where
# PYTHONDONTWRITEBYTECODE is set) each import recompiles thousands of modules (~10 s).
uv sync --locked --compile-bytecode --quiet
# ddpbench itself is installed from src/ (editable): compile it too, or every launcher, rank,
# Snakemake and report process compiles the modules it imports (0.3-0.9 s each).
.venv/bin/python -m compileall -q src >/dev/null
export PATH="$PWD/.venv/bin:$PATH"
