#!/usr/bin/env bash
# The checks that need a GPU, in one run of a few minutes (docs/usage.md, "Device"):
#   1. the CUDA tests (tests/test_device.py: simulator, `dynamix train` with none/bf16/fp16, calibration,
#      and torchrun ranks reducing with nccl against gloo on the CPU);
#   2. the paper profile's calibrations on this GPU (vgg11, resnet34, resnet50: fp32, and vgg11 in bf16),
#      written to OUT/calibrations (`dynamix calibrate` without --out makes one the reference);
#   3. one epoch of the paper profile's VGG11 on its 8-worker mixed-gpu cluster in the simulator (the
#      embedded CIFAR-10 subset), timed, from which docs/usage.md's formula gives a whole run's cost.
#      It reads calibrations/vgg11.json: where there is none, this GPU's is lent for the run and removed
#      after (a file left in calibrations/ is a dependency of every simulating DVC stage).
# Usage: tools/gpu_check.sh OUT   (PYTHON: an interpreter with torch, CUDA and the package's
# dependencies; default python3). Logs and JSON land in OUT; the exit status is the tests'.
set -uo pipefail
out=${1:?usage: tools/gpu_check.sh OUT}
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! "$py" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  echo "tools/gpu_check.sh: $py's torch sees no CUDA device: these checks need a GPU" >&2
  exit 2
fi
mkdir -p "$out"

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl',
'.'.join(map(str, torch.cuda.nccl.version())))"; nproc; } 2>&1 | tee "$out/machine.txt"

timeout 240 "$py" -m pytest tests/test_device.py -q -rA -p no:cacheprovider 2>&1 | tee "$out/test_device.log"
status=${PIPESTATUS[0]}

for model in vgg11 resnet34 resnet50; do
  timeout 120 "$py" -m dynamix.cli calibrate --model "$model" --device cuda --out "$out/calibrations"
done > "$out/calibrate.log" 2>&1
timeout 120 "$py" -m dynamix.cli calibrate --model vgg11 --device cuda --amp bf16 --out "$out/bf16" \
  >> "$out/calibrate.log" 2>&1
grep -h '"a_ms"\|"c_ms_per_sample"\|"path"' "$out/calibrate.log"

lent=""
if [ ! -e calibrations/vgg11.json ] && [ -e "$out/calibrations/vgg11.json" ]; then
  cp "$out/calibrations/vgg11.json" calibrations/ && lent=calibrations/vgg11.json
fi
trap '[ -z "$lent" ] || rm -f "$lent"' EXIT
SECONDS=0
timeout 300 "$py" -m dynamix.cli simulate --profile paper --cluster clusters/mixed-gpu.yaml --policy lbbsp \
  --set data.source=embedded --set train.epochs=1 --out "$out/paper-epoch" --no-progress \
  > "$out/paper-epoch.log" 2>&1
echo "paper-profile epoch: rc $? in $SECONDS s" | tee -a "$out/paper-epoch.log"
exit "$status"
