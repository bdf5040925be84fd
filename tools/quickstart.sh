#!/usr/bin/env bash
# Quick start.
#   tools/quickstart.sh        set up (tools/setup.sh), build, and run the
#                              bias + GELU + dropout + residual example chain
#   tools/quickstart.sh test   set up, build and run every test (tools/test.sh)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
case "${1:-}" in
  test) exec tools/test.sh ;;
  "") ;;
  *) echo "usage: tools/quickstart.sh [test]" >&2; exit 2 ;;
esac

tools/setup.sh
echo
echo "+ build/epifuse run examples/chains/bias_gelu_dropout_add.json"
build/epifuse run examples/chains/bias_gelu_dropout_add.json
