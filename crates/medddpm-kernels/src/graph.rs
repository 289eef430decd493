//! A step's launches recorded once as a CUDA graph and replayed with new inputs, so the host no
//! longer enqueues a thousand launches a step (what `torch.compile(mode="reduce-overhead")`
//! does with CUDA graphs).
//!
//! A step is a function of some float tensors (its inputs) to others (its outputs) that reads
//! nothing else that changes between calls: the timestep enters as its sinusoid tensor, never as
//! a host number, since numbers and uploads are frozen into the graph. It runs on a stream of its
//! own, whose memory pool frees nothing while a graph lives: the buffers the capture used are
//! the ones every replay writes. A replay copies the new inputs into the captured input buffers,
//! launches the graph, and returns copies of the captured outputs (which the next replay
//! overwrites). Backends that cannot capture say why ([`GraphError::Unsupported`]); callers
//! then run the step as it comes.

use std::any::Any;
use std::fmt;

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorMetadata;

use crate::conv::KernelBackend;

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
    pub(crate) inputs: Vec<FloatTensor<B>>,
    /// The buffers the graph writes its outputs to.
    pub(crate) outputs: Vec<FloatTensor<B>>,
    /// The backend's graph (for CUDA, `cubecl_cuda::CudaGraph` and where it replays).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) exec: Box<dyn Any + Send + Sync>,
    /// Launches and copies in the graph.
    pub(crate) nodes: usize,
    /// Its nodes by kind, e.g. `kernel 1097, memset 61`.
    pub(crate) kinds: String,
}

/// A step captured as a graph.
pub struct StepGraph<B: KernelBackend> {
    captured: Captured<B>,
}

impl<B: KernelBackend> fmt::Debug for StepGraph<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StepGraph")
            .field("inputs", &self.captured.inputs.len())
            .field("outputs", &self.captured.outputs.len())
            .field("nodes", &self.captured.nodes)
            .finish()
    }
}

impl<B: KernelBackend> StepGraph<B> {
    /// Runs `step` on `inputs` as it comes, on the stream graphs are captured on: the warm-up
    /// before [`StepGraph::capture`] (kernels compiled and tuned, the stream's pool grown to the
    /// step's size). On backends without graphs, `step` as it comes.
    pub fn warm_up(
        device: &B::Device,
        inputs: Vec<FloatTensor<B>>,
        step: &mut StepFn<'_, B>,
    ) -> Vec<FloatTensor<B>> {
        B::graph_warm_up(device, inputs, step)
    }

    /// Captures `step` (run once on `inputs` while recording) and replays it once: the graph and
    /// this call's outputs.
    pub fn capture(
        device: &B::Device,
        inputs: Vec<FloatTensor<B>>,
        step: &mut StepFn<'_, B>,
    ) -> Result<(Self, Vec<FloatTensor<B>>), GraphError> {
        let captured = B::graph_capture(device, inputs.clone(), step)?;
        let graph = Self { captured };
        let outputs = graph.replay(inputs)?;
        Ok((graph, outputs))
    }

    /// The step on new `inputs` (the captured shapes and dtypes), replayed.
    pub fn replay(&self, inputs: Vec<FloatTensor<B>>) -> Result<Vec<FloatTensor<B>>, GraphError> {
        let expected = &self.captured.inputs;
        if inputs.len() != expected.len() {
            return Err(GraphError::Capture(format!(
                "{} inputs given to a graph of {}",
                inputs.len(),
                expected.len()
            )));
        }
        for (i, (given, captured)) in inputs.iter().zip(expected).enumerate() {
            let (g, c) = (given.shape(), captured.shape());
            let (gd, cd) = (given.dtype(), captured.dtype());
            if g != c || gd != cd {
                return Err(GraphError::Capture(format!(
                    "input {i} is {g:?} {gd:?}, the graph's {c:?} {cd:?}"
                )));
            }
        }
        Ok(B::graph_replay(&self.captured, inputs))
    }

    /// Launches and copies in the graph.
    pub fn nodes(&self) -> usize {
        self.captured.nodes
    }

    /// The graph's nodes by kind, e.g. `kernel 1097, memset 61`.
    pub fn node_kinds(&self) -> &str {
        &self.captured.kinds
    }
}

impl<B: Backend> Captured<B> {
    /// A backend's capture, as [`KernelBackend::graph_capture`] returns it.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn new(
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
