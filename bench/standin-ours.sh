#!/usr/bin/env bash
# Stand-in for offline-agent, for dry runs of bench/run.sh before the real CLI
# exists:  OURS=bench/standin-ours.sh BUILD=0 bench/run.sh
# Implements the CLI contract with the reference tools, so ratios come out ~1.0.
set -euo pipefail
case ${1:-} in
  --version) echo "offline-agent standin (bspatch/unzip)" ;;
  patch)   # patch OLD PATCH NEW
    [[ $# -eq 4 ]] || { echo "usage: $0 patch OLD PATCH NEW" >&2; exit 64; }
    exec bspatch "$2" "$4" "$3" ;;
  extract) # extract ZIP DIR (DIR must not exist)
    [[ $# -eq 3 ]] || { echo "usage: $0 extract ZIP DIR" >&2; exit 64; }
    [[ ! -e $3 ]] || { echo "$3 exists" >&2; exit 1; }
    exec unzip -q "$2" -d "$3" ;;
  *) echo "usage: $0 --version | patch OLD PATCH NEW | extract ZIP DIR" >&2; exit 64 ;;
esac
