#!/usr/bin/env bash
# Issue 27 acceptance 1 on a machine with N >= 2 GPUs: `debug precision --fp16 --device cuda` on a >= 300-layer CNN
# (ResNet-152-shaped: tools/make_resnet50.py --blocks 3 8 36 3) with two convolutions planted FP16-sensitive
# (tools/make_fp16_sensitive.py), with 1 worker and with one worker per GPU (--workers auto); the answers must be
# equal (the 4 planted layers) and the N-GPU run >= 0.7*N times faster. Usage: bash tools/scale_out_gpu.sh [OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-${TMPDIR:-/tmp}/dk_scale_out_gpu}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
ngpu=$($py -c "from debugkit.debug.executor import visible_gpus; print(len(visible_gpus()))")
echo "visible GPUs: $ngpu"
$py tools/make_resnet50.py -o "$out/r152.onnx" --blocks 3 8 36 3
$py tools/make_fp16_sensitive.py "$out/r152.onnx" -o "$out/r152_planted.onnx" \
    --layers layer2.2.conv3 layer3.20.conv1 --answer "$out/answer.json" > /dev/null
for w in 1 auto; do
  t0=$(date +%s.%N)
  $py -m debugkit debug precision "$out/r152_planted.onnx" --fp16 --device cuda --workers $w \
      -o "$out/p_$w.json" --log "$out/p_$w.jsonl" | tail -4
  t1=$(date +%s.%N)
  echo "workers=$w wall_s=$(echo "$t1 - $t0" | bc)" | tee -a "$out/times.txt"
done
$py - "$out" "$ngpu" <<'PY'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
a, b = (json.load(open(f"{out}/p_{w}.json")) for w in ("1", "auto"))
must = sorted(json.load(open(f"{out}/answer.json"))["must_stay_fp32"])
t = dict(line.split()[0].split("=")[1:] + [float(line.split()[1].split("=")[1])] for line in open(f"{out}/times.txt"))
speed = t["1"] / t["auto"]
print(f"layers {a['layers']}; answers equal: {sorted(a['layer_precisions']) == sorted(b['layer_precisions'])}; "
      f"planted found: {sorted(b['layer_precisions']) == must}; workers {b['workers']}; "
      f"1 worker {t['1']:.1f} s, {b['workers']} GPU workers {t['auto']:.1f} s: {speed:.2f}x "
      f"(target >= {0.7 * n:.2f}x); critical path {b['critical_path']}")
sys.exit(0 if sorted(a["layer_precisions"]) == sorted(b["layer_precisions"]) == must else 1)
PY
