#!/usr/bin/env bash
# Issue 27 acceptance 4: a two-node Ray cluster whose nodes share no filesystem with the driver, on one host.
#
#   PYTHON=/path/to/venv-with-ray/bin/python bash tools/scale_out_two_node.sh [RESULTS_DIR]
#
# `ray start --head` and `ray start --address` (each --block, killed by pid at the end: never `ray stop`, which ends
# every Ray process of the user) run from working directories of their own with their own --temp-dir and TMPDIR, one
# CPU each; the driver names its models by paths relative to its own working directory, which no node has. Two
# generated ResNet-shaped models with planted FP16-sensitive convolutions are searched serially and on the cluster
# (`debug precision --ray ADDRESS --workers 2`), then swept serially and on the cluster (`sweep --task precision`).
# Checked: the cluster's answers equal the serial ones, every artifact lands in the driver's directories, the nodes'
# working and temporary directories hold no debugkit file afterwards, and tasks ran on both nodes. Results
# (summary.txt, the answers, logs) go to RESULTS_DIR (default $OUT/two_node when $OUT is set, else
# ${TMPDIR:-/tmp}/dk_two_node). Exit 0 when every check holds.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:+$OUT/two_node}}
out=$(mkdir -p "${out:-${TMPDIR:-/tmp}/dk_two_node}" && cd "${out:-${TMPDIR:-/tmp}/dk_two_node}" && pwd)
py=${PYTHON:-python3}
ray_cli=${RAY:-$(dirname "$py")/ray}
export PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH}
# Ray >= 2.5x turns token authentication on for `ray start --head` and looks for the token in ~/.ray: a local
# throwaway cluster goes without (head, node and driver alike), and the user's ~/.ray is left alone
export RAY_AUTH_MODE=disabled
root=$(mktemp -d "${TMPDIR:-/tmp}/dk_two_node.XXXXXX")
mkdir -p "$root"/{driver,head_cwd,head_tmp,head_ray,node_cwd,node_tmp,node_ray}
pids=()
address_file=$($py -c "from ray._common.utils import get_ray_address_file; print(get_ray_address_file(None))" \
    2>/dev/null || echo "${TMPDIR:-/tmp}/ray/ray_current_cluster")
saved_address=$(cat "$address_file" 2>/dev/null || true)
tree() { local c; for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do echo "$c"; tree "$c"; done; }
cleanup() {
  # the processes this script started, by pid: each `ray start --block` and what it started (GCS, raylet, workers)
  local all=() p
  for p in "${pids[@]}"; do all+=("$p" $(tree "$p")); done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done     # --block: SIGTERM stops its node's processes
  for p in "${pids[@]}"; do for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done; done
  for p in "${all[@]}"; do kill -9 "$p" 2>/dev/null; done   # whatever did not stop (a node that never joined)
  # `ray start` records its cluster for `--ray auto`; put back what was there before (other users' runs read it)
  if [ -n "$saved_address" ]; then echo "$saved_address" > "$address_file"; else rm -f "$address_file"; fi
  rm -rf "$root"
}
trap cleanup EXIT
free_port() { $py -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
port=$(free_port)
address=127.0.0.1:$port
log() { echo "$*" | tee -a "$out/summary.txt"; }
: > "$out/summary.txt"
log "date: $(date -u +%Y-%m-%dT%H:%M:%SZ); commit $(git -C "$repo" rev-parse --short HEAD 2>/dev/null); $(nproc) CPUs;" \
    "ray $($py -c 'import ray; print(ray.__version__)')"

# the models, in the driver's working directory only
cd "$root/driver"
for m in a b; do
  seed=$([ $m = a ] && echo 0 || echo 1)
  layers=$([ $m = a ] && echo "layer2.0.conv3 layer3.0.conv1" || echo "layer1.0.conv2 layer4.0.conv1")
  $py "$repo/tools/make_resnet50.py" -o base_$m.onnx --blocks 1 1 1 1 --size 64 --seed $seed > /dev/null || exit 3
  # shellcheck disable=SC2086
  $py "$repo/tools/make_fp16_sensitive.py" base_$m.onnx -o planted_$m.onnx --layers $layers > /dev/null || exit 3
  rm base_$m.onnx
done
search=(--fp16 --atol 1e-2)

# serial answers first (no Ray)
t0=$(date +%s.%N)
for m in a b; do
  $py -m debugkit debug precision planted_$m.onnx "${search[@]}" -o serial_$m.json --log serial_$m.jsonl \
      > "$out/serial_$m.log" 2>&1 || { log "serial search of planted_$m failed"; exit 1; }
done
$py -m debugkit sweep planted_a.onnx planted_b.onnx --task precision --task-args "${search[*]}" -o sweep_serial \
    > "$out/sweep_serial.log" 2>&1
log "serial: 2 searches + sweep $(echo "$(date +%s.%N) - $t0" | $py -c 'print(round(eval(input()), 1))') s"

# the cluster: two raylets, each with its own working directory, --temp-dir and TMPDIR
(cd "$root/head_cwd" && TMPDIR=$root/head_tmp exec "$ray_cli" start --head --block --port "$port" --num-cpus 1 \
    --include-dashboard false --disable-usage-stats --temp-dir "$root/head_ray" \
    --dashboard-agent-listen-port "$(free_port)" \
    --dashboard-agent-grpc-port "$(free_port)" --runtime-env-agent-port "$(free_port)" \
    --metrics-export-port "$(free_port)") > "$out/head.log" 2>&1 &
pids+=($!)
up=0
for _ in $(seq 60); do
  $py -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && { up=1; break; }
  kill -0 "${pids[0]}" 2>/dev/null || break
  sleep 1
done
[ $up = 1 ] || { log "the head did not start:"; tail -n 3 "$out/head.log" | tee -a "$out/summary.txt"; exit 3; }
sleep 3
(cd "$root/node_cwd" && TMPDIR=$root/node_tmp exec "$ray_cli" start --block --address "$address" --num-cpus 1 \
    --disable-usage-stats --temp-dir "$root/node_ray" \
    --dashboard-agent-listen-port "$(free_port)" --dashboard-agent-grpc-port "$(free_port)" \
    --runtime-env-agent-port "$(free_port)" --metrics-export-port "$(free_port)") > "$out/node.log" 2>&1 &
pids+=($!)
nodes=0
for _ in $(seq 60); do
  nodes=$($py -c "
import ray
ray.init(address='$address', log_to_driver=False)
print(sum(n['Alive'] for n in ray.nodes()))" 2>/dev/null | tail -1)
  [ "${nodes:-0}" -ge 2 ] && break
  sleep 2
done
log "cluster at $address: ${nodes:-0} live node(s) (head: cwd head_cwd, TMPDIR head_tmp; node 2: cwd node_cwd, TMPDIR node_tmp)"
[ "${nodes:-0}" -ge 2 ] || { log "the second node did not join"; tail -n 5 "$out/node.log"; exit 3; }

# the same work on the cluster
t0=$(date +%s.%N)
for m in a b; do
  $py -m debugkit debug precision planted_$m.onnx "${search[@]}" --ray "$address" --workers 2 -o ray_$m.json \
      --log ray_$m.jsonl > "$out/ray_$m.log" 2>&1 || { log "search of planted_$m on the cluster failed:"; tail -n 5 "$out/ray_$m.log"; }
done
t1=$(date +%s.%N)
$py -m debugkit sweep planted_a.onnx planted_b.onnx --task precision --task-args "${search[*]}" -o sweep_ray \
    --ray "$address" > "$out/sweep_ray.log" 2>&1
t2=$(date +%s.%N)
log "cluster: 2 searches $($py -c "print(round($t1 - $t0, 1))") s, sweep $($py -c "print(round($t2 - $t1, 1))") s"
cp serial_?.json ray_?.json "$out/" 2>/dev/null
cp sweep_serial/sweep.json "$out/sweep_serial.json" 2>/dev/null
cp sweep_ray/sweep.json "$out/sweep_ray.json" 2>/dev/null

# which nodes ran tasks: a Ray worker's log names the actor it hosts
for n in head node; do
  workers=$(grep -l -E ':actor_name:ProbeActor|:task_name:ProbeActor' "$root/${n}_ray"/session_*/logs/worker-*.out 2>/dev/null | wc -l)
  log "Ray workers on the $n that ran debugkit tasks: $workers"
done
# (debugkit-locks-<uid> is the machine's output-lock directory every debugkit run shares, kept by design)
leftovers=$(find "$root"/{head_cwd,head_tmp,node_cwd,node_tmp} -mindepth 1 -not -path '*/debugkit-locks-*' \
    \( -name 'debugkit*' -o -name '*.json*' -o -name '*.html' -o -name '*.onnx' -o -name '*.plan' \) 2>/dev/null |
    sed "s|$root/||")

$py - "$root" "$out" "$leftovers" <<'PY' | tee -a "$out/summary.txt"
import json, os, sys
root, out, leftovers = sys.argv[1], sys.argv[2], sys.argv[3].split()
drv = os.path.join(root, "driver")
ok = True
for m in "ab":
    s = json.load(open(f"{drv}/serial_{m}.json"))
    try:
        r = json.load(open(f"{drv}/ray_{m}.json"))
    except OSError:
        r = {"layer_precisions": None}
    same = sorted(s["layer_precisions"]) == sorted(r["layer_precisions"] or [])
    files = [f"ray_{m}{x}" for x in (".json", "_sensitivity.json", "_sensitivity.svg", ".html", ".jsonl")]
    missing = [f for f in files if not os.path.exists(os.path.join(drv, f))]
    print(f"debug precision planted_{m}: serial {sorted(s['layer_precisions'])} ({s['probes']} probes); cluster "
          f"{'the same' if same else r['layer_precisions']} ({r.get('probes')} probes, {r.get('workers')} workers); "
          f"artifacts on the driver: {'all ' + str(len(files)) if not missing else 'MISSING ' + str(missing)}")
    ok &= same and not missing
rows = {}
for k in ("serial", "ray"):
    try:
        rows[k] = [(x["model"], x["status"], x.get("kept"), x.get("layers")) for x in
                   json.load(open(f"{drv}/sweep_{k}/sweep.json"))["results"]]
    except (OSError, KeyError, ValueError) as e:
        rows[k] = f"no sweep.json ({e})"
files = {k: sorted(os.listdir(f"{drv}/sweep_ray/{k}")) if os.path.isdir(f"{drv}/sweep_ray/{k}") else None
         for k in ("planted_a", "planted_b")}
print(f"sweep serial: {rows['serial']}")
print(f"sweep on the cluster: {'the same rows' if rows['ray'] == rows['serial'] else rows['ray']}; files in "
      f"sweep_ray/<model>/ on the driver: {files}")
ok &= rows["ray"] == rows["serial"] and all(files.values())
print(f"debugkit files left in the nodes' working/temporary directories: {leftovers or 'none'}")
ok &= not leftovers
print("RESULT:", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
