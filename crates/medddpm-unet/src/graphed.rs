//! The U-Net's forward pass as a sampler's denoiser, replayed from a CUDA graph after a warm-up
//! (`medddpm_kernels::graph`): a sampling step then costs the host one replay instead of a
//! thousand launches. Where graphs cannot run, every step runs as it comes, and
//! [`GraphedUNet::status`] says why.

use std::cell::RefCell;
use std::collections::HashMap;

use burn::tensor::Tensor;
use medddpm_kernels::primitive::{float, tensor};
use medddpm_kernels::{KernelBackend, StepGraph};

use crate::UNet;

/// Forward passes of one input shape run as they come, on the graph stream, before the capture:
/// the first compiles and tunes kernels, the second runs the plans burn-fusion settled on.
const WARM_UP: usize = 2;

/// Where one input shape stands.
enum Phase<B: KernelBackend> {
    /// This many forward passes run for the warm-up.
    Warming(usize),
    Captured(StepGraph<B>),
}

/// What the graphs did, for the user.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GraphStatus {
    /// Graphs captured (one per input shape).
    pub captured: usize,
    /// Launches and copies in the last graph captured.
    pub nodes: usize,
    /// Its nodes by kind, e.g. `kernel 1097, memset 61`.
    pub node_kinds: String,
    /// Forward passes replayed from a graph.
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
    pub fn turn_off(&mut self, e: &medddpm_kernels::GraphError) {
        self.unsupported = matches!(e, medddpm_kernels::GraphError::Unsupported(_));
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

struct State<B: KernelBackend> {
    shapes: HashMap<[usize; 5], Phase<B>>,
    status: GraphStatus,
}

/// CUDA graphs of one model's forward passes, a graph per input shape. A graph reads the
/// weights the capture saw: use it with that model only.
pub struct ForwardGraphs<B: KernelBackend> {
    state: RefCell<State<B>>,
}

impl<B: KernelBackend> ForwardGraphs<B> {
    /// Graphs when `enabled` (else every pass as it comes, the status saying it was asked).
    pub fn new(enabled: bool) -> Self {
        let status = GraphStatus {
            off: (!enabled).then(|| "turned off".to_string()),
            requested: enabled,
            ..Default::default()
        };
        Self {
            state: RefCell::new(State {
                shapes: HashMap::new(),
                status,
            }),
        }
    }

    /// What the graphs did so far.
    pub fn status(&self) -> GraphStatus {
        self.state.borrow().status.clone()
    }

    /// `model`'s forward pass of `x` at `timesteps`: warmed up, captured or replayed.
    pub fn forward(&self, model: &UNet<B>, x: Tensor<B, 5>, timesteps: &[usize]) -> Tensor<B, 5> {
        let device = x.device();
        let sinusoid = model.sinusoid(timesteps, &device);
        let mut state = self.state.borrow_mut();
        if state.status.off.is_some() {
            return model.forward_sinusoid(x, sinusoid);
        }
        let inputs = vec![float(x.clone()), float(sinusoid.clone())];
        let mut step = |inputs: Vec<burn::tensor::ops::FloatTensor<B>>| {
            let [x, s]: [_; 2] = inputs.try_into().expect("two inputs");
            vec![float(model.forward_sinusoid(tensor(x), tensor(s)))]
        };
        let dims = x.dims();
        let phase = state.shapes.remove(&dims).unwrap_or(Phase::Warming(0));
        let outcome = match phase {
            Phase::Warming(done) if done < WARM_UP => {
                state.shapes.insert(dims, Phase::Warming(done + 1));
                Ok(StepGraph::<B>::warm_up(&device, inputs, &mut step))
            }
            Phase::Warming(_) => StepGraph::capture(&device, inputs, &mut step).map(|(g, out)| {
                state.status.captured += 1;
                state.status.nodes = g.nodes();
                state.status.node_kinds = g.node_kinds().to_string();
                state.shapes.insert(dims, Phase::Captured(g));
                out
            }),
            Phase::Captured(graph) => {
                let out = graph.replay(inputs);
                state.status.replays += usize::from(out.is_ok());
                state.shapes.insert(dims, Phase::Captured(graph));
                out
            }
        };
        match outcome {
            Ok(mut out) => tensor(out.remove(0)),
            Err(e) => {
                state.status.turn_off(&e);
                state.shapes.clear();
                model.forward_sinusoid(x, sinusoid)
            }
        }
    }
}

/// A [`UNet`] whose forward passes replay a CUDA graph per input shape ([`ForwardGraphs`]),
/// as a sampler's denoiser.
pub struct GraphedUNet<'a, B: KernelBackend> {
    model: &'a UNet<B>,
    graphs: ForwardGraphs<B>,
}

impl<'a, B: KernelBackend> GraphedUNet<'a, B> {
    /// `model` through graphs when `enabled`.
    pub fn new(model: &'a UNet<B>, enabled: bool) -> Self {
        Self {
            model,
            graphs: ForwardGraphs::new(enabled),
        }
    }

    /// What the graphs did so far.
    pub fn status(&self) -> GraphStatus {
        self.graphs.status()
    }
}

impl<B: KernelBackend> medddpm_diffusion::Denoiser<B> for GraphedUNet<'_, B> {
    fn predict_noise(&self, input: Tensor<B, 5>, timesteps: &[usize]) -> Tensor<B, 5> {
        self.graphs.forward(self.model, input, timesteps)
    }
}
