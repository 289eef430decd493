# H100 x1 (nvidia-h100-x1), 363 s. Binary: CARGO_PROFILE_RELEASE_STRIP=debuginfo cargo build --release -p medddpm --features cuda,wgpu,host-profile at commit 5359c2c (f16 training with loss scaling), carried as .device-bin/medddpm.xz with .device-data and .gl.
bash scripts/gpu-f16-quickstart.sh $OUT/q "wgpu:cubecl cuda:cudnn"
