//! Matrix products with cuBLAS on burn's CUDA backend (`medddpm-kernels`' `KernelBackend::product`
//! when the convolutions go to cuDNN).
//!
//! - **Library.** `libcublas.so` is loaded at run time (the file `MEDDDPM_CUBLAS` names, else
//!   `libcublas.so.13`, `.12`, `libcublas.so` from the library path), so building needs no CUDA
//!   toolkit; only the five functions used are declared here. Without it every product falls
//!   back to burn's `matmul`, said once.
//! - **Threads and stream.** Like the cuDNN engine's calls of searched shapes, a product is one
//!   operation in burn-fusion's stream whose execution hands one task to cubecl's device thread
//!   without waiting: it resolves the buffers there and enqueues `cublasGemmStridedBatchedEx` on
//!   the stream cubecl runs its own kernels on (one cuBLAS handle per device, used only by that
//!   thread). A failure there cannot fall back; it is reported by
//!   [`device_error`](crate::device_error()) as the cuDNN engine's are.
//! - **Operands.** Row-major `[batch, rows, cols]` with unit column stride are read in place
//!   whatever their row stride (attention's `q`, `k`, `v` are column slices of one tensor);
//!   others are made contiguous first. Transposition is cuBLAS's own (`ProductSpec`).
//! - **Precision.** bf16 and f16 operands with f32 accumulation; f32 with TF32 tensor cores
//!   only for `Precision::Tf32` (strict f32 otherwise); f64.

mod library;
mod op;

pub use op::register_product;
