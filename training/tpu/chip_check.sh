#!/usr/bin/env bash
# The TPU stack's binaries on one TPU chip, as a user's fresh TPU VM runs them
# (docs/train-tpu.md, "On one TPU chip"). From the repository root:
#
#   training/tpu/chip_check.sh OUT_DIR [bench] [whole] [stopped]   (default: all three)
#
#   bench    //training/tpu:scan_benchmark's step of one_chip.py's shape (unrolled,
#            the median of 10 steps), with XLA's estimate and the chip's peak memory
#   whole    //training/tpu:sft --config=one_chip.py, never stopped
#   stopped  the same run sent SIGTERM at step $STOP_AT (after its first checkpoint):
#            it must save and exit 0; rerun, it resumes, and //training/tpu:compare_runs
#            must find its final LoRA, losses and gradient norms equal to whole's
#
# Binaries run with `bazel run` where bazel is on PATH, else by their modules
# through tools/without_bazel.py; RUNNER replaces both (it is given MODULE -- FLAGS):
#   RUNNER="python3 tools/without_bazel.py run --find_links=wheels" training/tpu/chip_check.sh out
# Extra sft flags: SFT_FLAGS="--config.machine=tpu-v6e-1" on a v6e chip.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:?usage: training/tpu/chip_check.sh OUT_DIR [bench] [whole] [stopped]}"
shift
mkdir -p "$out"
out="$(cd "$out" && pwd)"
stages=("$@")
[[ ${#stages[@]} -gt 0 ]] || stages=(bench whole stopped)
STOP_AT="${STOP_AT:-15}"
read -r -a sft_flags <<<"${SFT_FLAGS:-}"

command_for() {  # MODULE FLAGS...: sets `cmd`, the command line that runs the binary
  local module="$1"
  shift
  if [[ -n "${RUNNER:-}" ]]; then
    read -r -a cmd <<<"$RUNNER"
    cmd+=("$module" -- "$@")
  elif command -v bazel >/dev/null 2>&1; then
    local path="${module//.//}"
    cmd=(bazel run "//${path%/*}:${path##*/}" -- "$@")
  else
    cmd=(python3 tools/without_bazel.py run "$module" -- "$@")
  fi
}

binary() {  # MODULE FLAGS...
  command_for "$@"
  "${cmd[@]}"
}

last_step() {  # the newest step a run's metrics.jsonl holds (0: none yet)
  python3 - "$1/metrics.jsonl" <<'EOF'
import json, sys
step = 0
try:
    for line in open(sys.argv[1]):
        try:
            step = max(step, json.loads(line).get("step", 0))
        except ValueError:
            pass
except FileNotFoundError:
    pass
print(step)
EOF
}

for stage in "${stages[@]}"; do
  echo "=== $stage ($(date -u +%H:%M:%S))"
  case "$stage" in
    bench)
      binary training.tpu.scan_benchmark --config=one_chip.py --layouts=unrolled --steps=10 \
        --output_json="$out/scan_benchmark.json"
      ;;
    whole)
      binary training.tpu.sft --config=one_chip.py --workdir="$out/whole" "${sft_flags[@]}"
      ;;
    stopped)
      [[ -d "$out/whole/checkpoints" ]] || { echo "error: run 'whole' first" >&2; exit 1; }
      rm -rf "$out/stopped"
      mkdir -p "$out/stopped"
      # The same random base (the same bytes: random_model.py) without writing it again.
      cp -r "$out/whole/base_model" "$out/stopped/"
      # A simple command in the background: $! is the binary's own process (the
      # runners exec it), which SIGTERM must reach.
      command_for training.tpu.sft --config=one_chip.py --workdir="$out/stopped" "${sft_flags[@]}"
      "${cmd[@]}" &
      pid=$!
      until [[ "$(last_step "$out/stopped")" -ge "$STOP_AT" ]]; do
        kill -0 "$pid" 2>/dev/null || { echo "error: the run ended before step $STOP_AT" >&2; exit 1; }
        sleep 0.2
      done
      kill -TERM "$pid"
      code=0
      wait "$pid" || code=$?
      echo "SIGTERM at step $STOP_AT: exit code $code; checkpoints $(ls "$out/stopped/checkpoints" | tr '\n' ' ')"
      [[ $code -eq 0 ]] || { echo "error: the stopped run exited $code, not 0" >&2; exit 1; }
      binary training.tpu.sft --config=one_chip.py --workdir="$out/stopped" "${sft_flags[@]}"
      binary training.tpu.compare_runs "$out/whole" "$out/stopped"
      ;;
    *)
      echo "error: unknown stage $stage (bench, whole, stopped)" >&2
      exit 1
      ;;
  esac
done
