#!/usr/bin/env bash
# Installs, at pinned versions, the reference that `toolsearch bench search` measures beside the
# engine, into the test peers' Python venv (.test-peers/venv, made by install-test-peers.sh or here):
#   bm25s     the BM25 library of the published evaluation reference (PyPI)
#   PyStemmer its English stemmer; numpy and scipy, which bm25s computes with
# Opt-in: the tests do not need it, and scripts/test.sh does not install it.
# Idempotent: a package already at its pinned version is left alone.
# Needs: python3 (>= 3.11, for numpy 2.4) with the venv module.
set -euo pipefail

BM25S_VERSION="0.3.16"
PYSTEMMER_VERSION="3.1.0"
NUMPY_VERSION="2.4.6"
SCIPY_VERSION="1.17.1"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="${TOOLSEARCH_TEST_PEERS:-$ROOT/.test-peers}"
VENV="$PEERS/venv"

die() {
    echo "install-bench-peers: $*" >&2
    exit 1
}

if [ ! -x "$VENV/bin/python" ]; then
    command -v python3 >/dev/null 2>&1 || die "python3 not found: install Python 3.11 or newer and run again"
    echo "creating venv $VENV ..."
    python3 -m venv "$VENV" || die "python3 -m venv failed (on Debian: apt-get install python3-venv)"
fi
PYTHON="$VENV/bin/python"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
    || die "$PYTHON is $("$PYTHON" -V 2>&1); numpy $NUMPY_VERSION needs 3.11 or newer (remove $VENV and run again with a newer python3)"

have_versions() {
    "$PYTHON" - "$BM25S_VERSION" "$PYSTEMMER_VERSION" "$NUMPY_VERSION" "$SCIPY_VERSION" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version, PackageNotFoundError
wanted = dict(zip(["bm25s", "PyStemmer", "numpy", "scipy"], sys.argv[1:]))
try:
    ok = all(version(name) == v for name, v in wanted.items())
except PackageNotFoundError:
    ok = False
sys.exit(0 if ok else 1)
PY
}
if have_versions; then
    echo "bm25s $BM25S_VERSION, PyStemmer $PYSTEMMER_VERSION, numpy $NUMPY_VERSION and scipy $SCIPY_VERSION already installed"
else
    echo "installing bm25s==$BM25S_VERSION PyStemmer==$PYSTEMMER_VERSION numpy==$NUMPY_VERSION scipy==$SCIPY_VERSION ..."
    "$PYTHON" -m pip install --quiet --disable-pip-version-check --only-binary=:all: \
        "bm25s==$BM25S_VERSION" "PyStemmer==$PYSTEMMER_VERSION" \
        "numpy==$NUMPY_VERSION" "scipy==$SCIPY_VERSION" \
        || die "pip install failed in $VENV (is PyPI reachable? --only-binary: a wheel is needed for this Python and platform)"
fi
"$PYTHON" -c 'import bm25s, Stemmer' 2>/dev/null \
    || die "bm25s or Stemmer does not import in $PYTHON after the install; run $PYTHON -c 'import bm25s, Stemmer' to see why"

echo
echo "bench peers ready: bm25s $BM25S_VERSION with PyStemmer $PYSTEMMER_VERSION in $PYTHON"
echo "  toolsearch bench search finds it there (or through TOOLSEARCH_PYTHON)"
