#!/bin/sh
# Run the VM test tier: boots trixie-backports' kernel 7.3.4 (RDMA_CNI_VM_KERNEL=bookworm:
# Debian 12's 6.1; scripts/vm-prepare.sh) once under virtme-ng (qemu) and
# runs `pytest -m vm` inside; exits with pytest's status (124 timeout, 125 VM failure).
#   scripts/vm-run.sh [--timeout S] [--exec CMD] [--dry-run] [pytest args...]
# Default pytest target: tests/vm. See tests/vm/runner.py --help.
set -eu
REPO=$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)
PY=$REPO/.venv/bin/python
[ -x "$PY" ] || PY=python3
exec "$PY" "$REPO/tests/vm/runner.py" "$@"
