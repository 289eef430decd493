//! What a backend hands back when it records a step as a graph, and why it might not: the types
//! shared by the backend trait, the CUDA capture and the replaying front-end (`medddpm_kernels::graph`).

use std::any::Any;

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;

/// A step: its input tensors to its output tensors.
pub type StepFn<'a, B> = dyn FnMut(Vec<FloatTensor<B>>) -> Vec<FloatTensor<B>> + 'a;

/// Why a step is not replayed from a graph.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// The backend records no graphs (CPU, wgpu, or a setting that rules them out).
    #[error("{0}")]
    Unsupported(String),
    /// The capture failed: the step did something a graph cannot replay.
    #[error("the capture failed: {0}")]
    Capture(String),
}

/// A backend's captured step: its input and output buffers and the backend's graph.
pub struct Captured<B: Backend> {
    /// The buffers the graph reads its inputs from (held: the pool must not reuse them).
    pub inputs: Vec<FloatTensor<B>>,
    /// The buffers the graph writes its outputs to.
    pub outputs: Vec<FloatTensor<B>>,
    /// The backend's graph (for CUDA, `cubecl_cuda::CudaGraph` and where it replays).
    pub exec: Box<dyn Any + Send + Sync>,
    /// Launches and copies in the graph.
    pub nodes: usize,
    /// Its nodes by kind, e.g. `kernel 1097, memset 61`.
    pub kinds: String,
}

impl<B: Backend> Captured<B> {
    /// A backend's capture, as `KernelBackend::graph_capture` returns it.
    pub fn new(
        inputs: Vec<FloatTensor<B>>,
        outputs: Vec<FloatTensor<B>>,
        exec: Box<dyn Any + Send + Sync>,
        (nodes, kinds): (usize, String),
    ) -> Self {
        Self {
            inputs,
            outputs,
            exec,
            nodes,
            kinds,
        }
    }
}
