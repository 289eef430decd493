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

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;

use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorMetadata;

use crate::capture::{Captured, GraphError, StepFn};
use crate::extension::KernelBackend;

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

/// Steps run as they come on the graph stream before a key's capture: the first compiles and
/// tunes kernels, the second runs the plans burn-fusion settled on.
pub const WARM_UP: usize = 2;

/// What a step's graphs did, for the user.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GraphStatus {
    /// Graphs captured (one per key: an input shape, a batch shape and divisor).
    pub captured: usize,
    /// Launches and copies in the last graph captured.
    pub nodes: usize,
    /// Its nodes by kind, e.g. `kernel 1097, memset 61`.
    pub node_kinds: String,
    /// Steps replayed from a graph.
    pub replays: usize,
    /// Why steps ran as they come, if they did (the first reason).
    pub off: Option<String>,
    /// The backend records no graphs (the CPU, wgpu): `off` says so, and nothing went wrong.
    pub unsupported: bool,
    /// Graphs were asked for.
    pub requested: bool,
}

impl GraphStatus {
    /// Steps run as they come from now on, for the reason `e` gives.
    pub fn turn_off(&mut self, e: &GraphError) {
        self.unsupported = matches!(e, GraphError::Unsupported(_));
        self.off = Some(e.to_string());
    }

    /// One line for the user when graphs were asked for and ran or failed (nothing when the
    /// backend has none).
    pub fn summary(&self) -> Option<String> {
        match &self.off {
            _ if !self.requested => None,
            Some(_) if self.unsupported => None,
            Some(why) => Some(format!("CUDA graphs off ({why}): steps ran as they came")),
            None if self.captured > 0 => Some(format!(
                "CUDA graphs: {} captured ({} launches and copies in the last), {} steps replayed",
                self.captured, self.nodes, self.replays
            )),
            None => None,
        }
    }
}

/// Where one key stands.
enum Phase<B: KernelBackend, M> {
    /// This many steps run for the warm-up.
    Warming(usize),
    /// The graph, and what its caller keeps beside it.
    Captured(StepGraph<B>, M),
}

/// Graphs of one step, one per key (what makes a new graph: input shapes, a loss divisor), each
/// captured after [`WARM_UP`] steps as they come, with `M` kept beside it for its caller. The
/// first failure turns them all off: [`StepGraphs::run`] says so and the caller runs the step as
/// it comes from then on.
pub struct StepGraphs<B: KernelBackend, K, M = ()> {
    phases: HashMap<K, Phase<B, M>>,
    status: GraphStatus,
}

impl<B: KernelBackend, K: Eq + Hash, M> StepGraphs<B, K, M> {
    /// Graphs when `enabled` (else every step as it comes, the status saying it was asked).
    pub fn new(enabled: bool) -> Self {
        Self {
            phases: HashMap::new(),
            status: GraphStatus {
                off: (!enabled).then(|| "turned off".to_string()),
                requested: enabled,
                ..Default::default()
            },
        }
    }

    /// What the graphs did so far.
    pub fn status(&self) -> &GraphStatus {
        &self.status
    }

    /// Whether steps run as they come (graphs not asked for, unsupported, or failed).
    pub fn is_off(&self) -> bool {
        self.status.off.is_some()
    }

    /// Steps run as they come from now on, for `reason` (the first reason is kept).
    pub fn turn_off(&mut self, reason: String) {
        self.status.off.get_or_insert(reason);
        self.phases.clear();
    }

    /// What the caller kept beside `key`'s graph, once captured.
    pub fn kept(&self, key: &K) -> Option<&M> {
        match self.phases.get(key) {
            Some(Phase::Captured(_, kept)) => Some(kept),
            _ => None,
        }
    }

    /// Drops `key`'s graph: its next steps warm up and capture anew.
    pub fn forget(&mut self, key: &K) {
        self.phases.remove(key);
    }

    /// `step` on `inputs` for `key`: as it comes while warming up, then captured (with
    /// `keep()`, called after the capture, kept beside the graph) and replayed. An error turns
    /// the graphs off (the status says why); the caller then runs the step as it comes.
    pub fn run(
        &mut self,
        key: K,
        device: &B::Device,
        inputs: Vec<FloatTensor<B>>,
        step: &mut StepFn<'_, B>,
        keep: impl FnOnce() -> M,
    ) -> Result<Vec<FloatTensor<B>>, GraphError> {
        let outcome = match self.phases.remove(&key).unwrap_or(Phase::Warming(0)) {
            Phase::Warming(done) if done < WARM_UP => {
                self.phases.insert(key, Phase::Warming(done + 1));
                return Ok(StepGraph::<B>::warm_up(device, inputs, step));
            }
            Phase::Warming(_) => StepGraph::capture(device, inputs, step).map(|(graph, out)| {
                self.status.captured += 1;
                self.status.nodes = graph.nodes();
                self.status.node_kinds = graph.node_kinds().to_string();
                self.phases.insert(key, Phase::Captured(graph, keep()));
                out
            }),
            Phase::Captured(graph, kept) => {
                let out = graph.replay(inputs);
                self.status.replays += usize::from(out.is_ok());
                self.phases.insert(key, Phase::Captured(graph, kept));
                out
            }
        };
        outcome.inspect_err(|e| {
            self.status.turn_off(e);
            self.phases.clear();
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::{Tensor, TensorData};

    use crate::primitive::{float, tensor};

    fn input(v: f32) -> Vec<FloatTensor<Flex>> {
        let t = Tensor::<Flex, 1>::from_data(
            TensorData::new(vec![v, 2.0 * v], [2]),
            &Default::default(),
        );
        vec![float(t)]
    }

    fn value(out: Vec<FloatTensor<Flex>>) -> Vec<f32> {
        let t: Tensor<Flex, 1> = tensor(out.into_iter().next().unwrap());
        t.into_data().to_vec().unwrap()
    }

    /// On the CPU the warm-up runs the step as it comes, the capture then says the backend has
    /// no graphs, and from then on the caller runs every step itself, the status saying why
    /// without a line for the user.
    #[test]
    fn step_graphs_warm_up_then_turn_off_quietly_where_nothing_captures() {
        let device = Default::default();
        let mut graphs = StepGraphs::<Flex, u8, &str>::new(true);
        let mut step = |inputs: Vec<FloatTensor<Flex>>| {
            let x: Tensor<Flex, 1> = tensor(inputs.into_iter().next().unwrap());
            vec![float(x.mul_scalar(3.0))]
        };
        for i in 0..WARM_UP {
            let out = graphs.run(7, &device, input(i as f32), &mut step, || "kept");
            assert_eq!(value(out.unwrap()), vec![3.0 * i as f32, 6.0 * i as f32]);
            assert!(
                graphs.kept(&7).is_none(),
                "nothing is kept while warming up"
            );
        }
        let err = graphs.run(7, &device, input(1.0), &mut step, || "kept");
        assert!(matches!(err, Err(GraphError::Unsupported(_))), "{err:?}");
        assert!(graphs.is_off());
        let status = graphs.status();
        assert!(status.unsupported && status.requested);
        assert_eq!((status.captured, status.replays), (0, 0));
        assert_eq!(status.summary(), None);
        graphs.turn_off("a later reason".into());
        assert_ne!(graphs.status().off.as_deref(), Some("a later reason"));
    }

    /// Graphs not asked for are off from the start, and a reason given first is the one kept.
    #[test]
    fn step_graphs_turned_off_keep_the_first_reason() {
        let off = StepGraphs::<Flex, u8>::new(false);
        assert!(off.is_off());
        assert_eq!(
            off.status().summary(),
            None,
            "not asked for: nothing to say"
        );
        let mut graphs = StepGraphs::<Flex, u8>::new(true);
        assert!(!graphs.is_off());
        graphs.turn_off("activation checkpointing".into());
        graphs.turn_off("another".into());
        let status = graphs.status();
        assert_eq!(status.off.as_deref(), Some("activation checkpointing"));
        assert_eq!(
            status.summary().as_deref(),
            Some("CUDA graphs off (activation checkpointing): steps ran as they came")
        );
    }
}
