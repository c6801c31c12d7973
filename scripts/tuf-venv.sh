#!/usr/bin/env bash
# Makes .build-tuf-venv: python-tuf 7.0.1, the TUF reference implementation the interop
# tests run against (TUFInteropTests, TUFVectorTests). A virtual environment: Debian
# refuses a system-wide pip install. Prints the venv's python; cheap when it exists.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.build-tuf-venv
if ! "$venv/bin/python3" -c 'import tuf, cryptography, sys; sys.exit(tuf.__version__ != "7.0.1")' 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    # cryptography: securesystemslib verifies and signs Ed25519 with it.
    "$venv/bin/pip" install -q --disable-pip-version-check tuf==7.0.1 cryptography
fi
echo "$PWD/$venv/bin/python3"
