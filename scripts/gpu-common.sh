# Set-up shared by the GPU-machine scripts (sourced, from the repository root): the carried
# binary, the Vulkan loader, the tuning cache, and packing the cache back up.

# The release binary carried as .device-bin/medddpm.xz, unpacked to /tmp/medddpm, and the
# cuBLAS it loads.
unpack_binary() {
  xz -t .device-bin/medddpm.xz || { echo "carried binary is damaged"; exit 3; }
  xz -dc .device-bin/medddpm.xz > /tmp/medddpm && chmod +x /tmp/medddpm
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
