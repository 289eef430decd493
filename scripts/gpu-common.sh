# Set-up shared by the GPU-machine scripts (sourced, from the repository root): the carried
# binary, the Vulkan loader, the tuning cache, and packing the cache back up.

# The release binary carried as .device-bin/medddpm.xz, unpacked to /tmp/medddpm, and the
# cuBLAS it loads.
unpack_binary() {
  unpack_xz .device-bin/medddpm.xz /tmp/medddpm
  cublas_library
}

# Checks the carried SRC (xz) and unpacks it to the executable DEST: `unpack_xz SRC DEST`.
unpack_xz() {
  xz -t "$1" || { echo "carried binary $1 is damaged"; exit 3; }
  xz -dc "$1" > "$2" && chmod +x "$2"
}

# Builds compared in one call (GPUs differ from machine to machine), carried as
# .device-bin/medddpm-NAME.xz and unpacked to /tmp/medddpm-NAME: `unpack_binaries old new`, then
# `BIN=/tmp/medddpm-old bench_run ...` (or call /tmp/medddpm-NAME) for each, interleaved.
unpack_binaries() {
  local v
  for v in "$@"; do unpack_xz ".device-bin/medddpm-$v.xz" "/tmp/medddpm-$v"; done
  cublas_library
}

# cuBLAS for the products (medddpm-kernels' `cublas`): the system's if the loader knows one,
# else the copy PyTorch's wheels bring, named in MEDDDPM_CUBLAS.
cublas_library() {
  ldconfig -p | grep -qE 'libcublas\.so(\.1[23])? ' && return
  local site lib
  site=$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null) || return
  lib=$(find "$site/nvidia" -name 'libcublas.so.1*' 2>/dev/null | sort | tail -1)
  [ -n "$lib" ] && export MEDDDPM_CUBLAS=$lib
  echo "cuBLAS: ${MEDDDPM_CUBLAS:-not found}"
}

# CUPTI for the bench's GPU trace: the copy PyTorch's wheels bring, named in MEDDDPM_CUPTI.
cupti_library() {
  local site lib
  site=$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null) || return
  lib=$(find "$site/nvidia" -name 'libcupti.so*' 2>/dev/null | sort | head -1)
  [ -n "$lib" ] && export MEDDDPM_CUPTI=$lib
  echo "CUPTI: ${MEDDDPM_CUPTI:-not found}"
}

# The Vulkan loader and glvnd, carried as .gl/*.deb (the device README says how to fetch them).
vulkan_loader() {
  if ls .gl/*.deb > /dev/null 2>&1; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
  fi
  if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  fi
}

# The tuning cache in $MEDDDPM_TUNE_CACHE (default /tmp/tune), unpacked once per machine: what
# an earlier call of the session brought back (.device-data, git-ignored: tuning results and
# compiled kernels), else the committed scripts/device-cache/tune-h100.tgz.
tune_cache() {
  export MEDDDPM_TUNE_CACHE=${MEDDDPM_TUNE_CACHE:-/tmp/tune}
  mkdir -p "$MEDDDPM_TUNE_CACHE"
  [ -f "$MEDDDPM_TUNE_CACHE/.unpacked" ] && return
  if [ -f .device-data/tune-cache.tgz ]; then
    tar xzf .device-data/tune-cache.tgz -C "$MEDDDPM_TUNE_CACHE"
  else
    tar xzf scripts/device-cache/tune-h100.tgz -C "$MEDDDPM_TUNE_CACHE"
  fi
  [ -f .device-data/compiled.txz ] && tar xJf .device-data/compiled.txz -C "$MEDDDPM_TUNE_CACHE"
  touch "$MEDDDPM_TUNE_CACHE/.unpacked"
}

# OUTDIR/tune-cache.tgz (tuning results, without the probe's float64 files and compiled code)
# and OUTDIR/compiled.txz (cubecl's PTX and the CUDA driver's cache), to carry into a later call.
pack_tune_cache() {
  tar czf "$1/tune-cache.tgz" --exclude=probe-reference --exclude=cuda-driver-jit \
    --exclude='ptx*' --exclude=.unpacked -C "$MEDDDPM_TUNE_CACHE" .
  (cd "$MEDDDPM_TUNE_CACHE" && { ls -d */cuda-driver-jit; find . -name 'ptx*'; } 2>/dev/null \
    | XZ_OPT=-T0 tar cJf "$1/compiled.txz" -T -)
}

# cudarc opens libnccl.so; PyTorch's NCCL wheel ships libnccl.so.2 only: link it in /tmp/nccl.
# NVLink multicast stays off (the device README: it can take the host's GPUs out of service).
nccl_library() {
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  NCCL_DIR=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)/lib
  mkdir -p /tmp/nccl && ln -sf "$NCCL_DIR/libnccl.so.2" /tmp/nccl/libnccl.so
  export LD_LIBRARY_PATH=/tmp/nccl:${LD_LIBRARY_PATH:-}
}

# The GPU, the driver, the carried binary's commit and (where PyTorch is installed) its and
# cuDNN's versions, into $1/machine.txt and on stdout.
machine_info() {
  { nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
    cat .device-bin/binary-commit.txt
    python3 -c 'import torch; print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version())' 2>/dev/null
  } > "$1/machine.txt"
  cat "$1/machine.txt"
}

# nvidia-smi's memory.used sampled every 100 ms into FILE in the background (of GPU INDEX only,
# when given): `pid=$(poll_memory FILE [INDEX])`, then `kill $pid`.
poll_memory() {
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits ${2:+-i "$2"} -lms 100 > "$1" &
  echo $!
}

# The largest sample of a poll_memory file, MiB.
peak_mib() { sort -n "$1" | tail -1; }

# One `medddpm bench` run of cuda's whole-head model (warm-up 3, 10 steps) into $W/bench-NAME,
# with GPU 0's memory polled beside it ($W/smi-NAME.txt): `bench_run NAME LIMIT ARGS` (LIMIT
# seconds; ARGS the precisions, layouts and engine; the binary $BIN, /tmp/medddpm unless set).
# Skipped when fewer than LIMIT of the call's 575 s are left (SECONDS counts from the call's
# start). Prints the whole-GPU peak, the step medians and the pools after the forward pass.
bench_run() {
  local name=$1 limit=$2; shift 2
  if [ $SECONDS -gt $((575 - limit)) ]; then echo "bench $name skipped ($SECONDS s)"; return; fi
  local smi; smi=$(poll_memory "$W/smi-$name.txt" 0)
  timeout "$limit" "${BIN:-/tmp/medddpm}" bench --backends cuda --warmup 3 --steps 10 --out "$W/bench-$name" \
    --timeout $((limit - 5)) "$@" > "$W/bench-$name.log" 2>&1
  local rc=$?; kill "$smi"
  echo "bench $name rc=$rc whole-GPU peak $(peak_mib "$W/smi-$name.txt") MiB ($SECONDS s)"
  grep -E "step median" "$W/bench-$name.log" | cut -c1-200
  grep -A2 "in use | reserved" "$W/bench-$name.log" | tail -1
  rm -f "$W/bench-$name"/*.png
}

# The released whole-head settings for a short `medddpm train` on cached 128^3 phantoms (in
# /tmp/phantoms128), STEPS optimizer steps, one checkpoint at the end, no samples: `train_toml
# STEPS > FILE`.
train_toml() {
  local steps=${1:?train_toml STEPS}
  sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
      -e 's|^normalization = .*|normalization = "none"|' \
      -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
      -e "s|^steps = .*|steps = $steps|" -e "s|^save_every = .*|save_every = $steps|" \
      -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
      experiments/whole-head-128.toml
}

# A run's optimizer step (the median of steps 4 on, the first three holding the warm-up; the
# upper middle of an even count) from its metrics.jsonl, and its losses: `train_summary
# RUN_DIR/metrics.jsonl`.
train_summary() {
  python3 - "$1" <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
t = sorted(b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m[2:], m[3:]))
step = f"{t[len(t)//2]*1000:.1f} ms" if t else "n/a (fewer than 4 steps)"
print(f"  {len(m)} steps, optimizer step (4..) median {step}; losses {[round(x['loss'], 7) for x in m]}")
PY
}

# The tuned PyTorch reference under torch.compile, its profiler summed by
# scripts/torch-gpu-profile.py, with the whole-GPU peak: `torch_compile_run LIMIT_S [MODE]` in $W,
# MODE 1 (default mode, the default: torch-compile1.json / .log, smi-torch.txt) or 2
# (mode="reduce-overhead": torch-compile2.json / .log, smi-torch2.txt); prints the wall and
# GPU-busy medians.
torch_compile_run() {
  local limit=${1:?torch_compile_run LIMIT_S [MODE]} mode=${2:-1} smi smi_file
  smi_file="$W/smi-torch.txt"; [ "$mode" = 1 ] || smi_file="$W/smi-torch$mode.txt"
  smi=$(poll_memory "$smi_file" 0)
  PYTHONUNBUFFERED=1 timeout "$limit" python3 scripts/torch-gpu-profile.py --config bf16_fix \
    --compile "$mode" --steps 10 --profiled 3 > "$W/torch-compile$mode.json" 2> "$W/torch-compile$mode.log"
  echo "torch compile=$mode rc=$? whole-GPU peak $(peak_mib "$smi_file") MiB ($SECONDS s)"
  kill "$smi"
  tail -2 "$W/torch-compile$mode.log" | cut -c1-200
  python3 - "$W/torch-compile$mode.json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith('{'): continue
    r = json.loads(line)
    for k in ('train', 'sample'):
        t = r.get(k)
        if t: print(f"  torch {k}: wall {t['wall_ms_median']:.2f} ms, GPU busy {t['gpu_busy_ms']:.1f} ms, {t['launches']:.0f} launches")
    if 'error' in r: print('  error', r['error'])
PY
}

# What a bench_run NAME traced: its first steps, the GPU busy time of the traced training
# micro-step, and cuDNN's kernels by operation (weight gradient, forward, data gradient):
# `bench_summary NAME`.
bench_summary() {
  python3 - "$W/bench-$1/results.jsonl" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
g = r.get('train_gpu') or {}
print(f"  first train step {r.get('first_train_step_s')} s, first sampling step {r.get('first_sample_step_s')} s; train busy {g.get('busy_ms', float('nan')):.2f} of {g.get('wall_ms', float('nan')):.2f} ms traced")
conv = {}
for t in g.get('top', []):
    for k in ('wgrad', 'dgrad', 'fprop'):
        if k in t['name']: conv[k] = conv.get(k, 0) + t['ms']
print('  cuDNN kernels a step (ms): ' + ', '.join(f"{k} {v:.2f}" for k, v in conv.items()))
PY
}
