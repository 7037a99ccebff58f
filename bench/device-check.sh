#!/usr/bin/env bash
# One run on a machine with an NVIDIA GPU: real captures of every GPU-facing part of healthcheck, no network,
# under 5 minutes (the step limits below add up to 265 s), everything under one folder.
#   OUT=/tmp/hc-device bench/device-check.sh       # run from anywhere; $OUT, else a new folder under /tmp
#   HC_PROFILE=h200-sxm-8x bench/device-check.sh    # else guessed from the GPU name (H100, H200, B200)
# Steps (each under timeout(1); a failing step never stops the others; summary.tsv lists rc and seconds):
#   env        GPU list, driver, Python, PyTorch/CuPy/nvcc/nvbandwidth/dcgmi/all_reduce_perf presence
#   captures   nvidia-smi -q -x, -q, topo -m, nvlink -s/-e: real outputs for fixtures
#   run-local  healthcheck run --local: every probe on real nvidia-smi -q -x and NVML
#   run-bench  healthcheck run --local --probes gpu --benchmarks gpuperf,sdc: the node programs with telemetry
#   gate       healthcheck gate --budget 60 --cache-minutes 0: gate.json holds each test's real wall time
#   programs   gpuperf_node.py and sdc_node.py directly, nvbandwidth and dcgmi diag -r 1 -j when installed
# Not yet run on a GPU (docs/gate.md says so): the first run on one is its test.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$(mktemp -d /tmp/hc-device-check.XXXXXX)}
mkdir -p "$OUT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
export ROOT OUT PY
HC="$PY -m healthcheck"
SUMMARY="$OUT/summary.tsv"
printf 'step\trc\tseconds\n' >"$SUMMARY"

step() {  # step NAME LIMIT_S COMMAND...: stdout/stderr to NAME.out/.err, rc and seconds to summary.tsv
  local name=$1 limit=$2 start end rc
  shift 2
  start=$(date +%s%N)
  timeout -k 5 "$limit" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
  rc=$?
  end=$(date +%s%N)
  awk -v n="$name" -v rc="$rc" -v ns="$((end - start))" 'BEGIN { printf "%s\t%s\t%.1f\n", n, rc, ns / 1e9 }' >>"$SUMMARY"
  echo "$name: rc=$rc"
}

env_report() {
  uname -a; date -u
  nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,pci.bus_id,memory.total --format=csv
  "$PY" --version
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' \
    || echo "torch: not importable"
  "$PY" -c 'import cupy; print("cupy", cupy.__version__)' || echo "cupy: not importable"
  for tool in nvcc nvbandwidth dcgmi all_reduce_perf nv-hostengine; do
    printf '%s: %s\n' "$tool" "$(command -v "$tool" || echo absent)"
  done
}

captures() {
  nvidia-smi -q -x >"$OUT/nvidia-smi-q-x.xml"
  nvidia-smi -q >"$OUT/nvidia-smi-q.txt"
  nvidia-smi topo -m >"$OUT/nvidia-smi-topo.txt"
  nvidia-smi nvlink -s >"$OUT/nvidia-smi-nvlink-s.txt"
  nvidia-smi nvlink -e >"$OUT/nvidia-smi-nvlink-e.txt"
  true
}

programs() {
  cd "$ROOT/benchmarks" || return 1
  timeout 60 "$PY" gpuperf_node.py >"$OUT/gpuperf-node.txt" 2>"$OUT/gpuperf-node.err"
  timeout 30 "$PY" sdc_node.py >"$OUT/sdc-node.txt" 2>"$OUT/sdc-node.err"
  if command -v nvbandwidth >/dev/null; then
    timeout 30 nvbandwidth -t host_to_device_memcpy_ce -t device_to_host_memcpy_ce \
      -t device_to_device_memcpy_read_ce -t device_local_copy >"$OUT/nvbandwidth.txt" 2>&1
  fi
  if command -v dcgmi >/dev/null; then
    timeout 30 dcgmi diag -r 1 -j >"$OUT/dcgmi-diag-r1.json" 2>&1
  fi
  true
}

export -f env_report captures programs   # timeout(1) runs them through bash -c

PROFILE=${HC_PROFILE:-}
if [ -z "$PROFILE" ]; then
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" in
    *H200*) PROFILE=h200-sxm-8x ;;
    *H100*) PROFILE=h100-sxm5-8x ;;
    *B200*) PROFILE=b200-hgx-8x ;;
  esac
fi
PROFILE_ARGS=()
[ -n "$PROFILE" ] && PROFILE_ARGS=(--profile "$PROFILE")
echo "out: $OUT  profile: ${PROFILE:-none}"

step env 15 bash -c env_report
step captures 20 bash -c captures
step run-local 60 $HC run --local "${PROFILE_ARGS[@]}" --out "$OUT/run-local"
step run-bench 45 $HC run --local --probes gpu --benchmarks gpuperf,sdc "${PROFILE_ARGS[@]}" --out "$OUT/run-bench"
step gate 70 $HC gate --out "$OUT/gate" --budget 60 --cache-minutes 0 "${PROFILE_ARGS[@]}"
step programs 55 bash -c programs
cp "$OUT"/gate/*/gate.json "$OUT/gate.json" 2>/dev/null
echo "done: $OUT (summary.tsv, gate.json: each test's wall time)"
