#!/usr/bin/env bash
# The device check (docs/saliency.md, "On an accelerator"): the engine and faithfulness
# benchmarks, the main job and the real network's card without its trust section, timed, with
# the GPU's utilisation beside them, in one table (scripts/device_check.py says what each
# phase runs). Full sizes where nvidia-smi lists a GPU (under 8 minutes on one), small sizes on
# a CPU.
#
#     bash scripts/device_check.sh [--size=auto|full|small] [--output_dir=device_check]
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" scripts/device_check.py "$@"
