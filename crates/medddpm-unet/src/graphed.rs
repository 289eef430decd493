//! The U-Net's forward pass as a sampler's denoiser, replayed from a CUDA graph after a warm-up
//! (`medddpm_kernels::graph`): a sampling step then costs the host one replay instead of a
//! thousand launches. Where graphs cannot run, every step runs as it comes, and
//! [`GraphedUNet::status`] says why.

use std::cell::RefCell;

use burn::tensor::Tensor;
use medddpm_kernels::primitive::{float, tensor};
pub use medddpm_kernels::GraphStatus;
use medddpm_kernels::{KernelBackend, StepGraphs};

use crate::UNet;

/// CUDA graphs of one model's forward passes, a graph per input shape. A graph reads the
/// weights the capture saw: use it with that model only.
pub struct ForwardGraphs<B: KernelBackend> {
    graphs: RefCell<StepGraphs<B, [usize; 5]>>,
}

impl<B: KernelBackend> ForwardGraphs<B> {
    /// Graphs when `enabled` (else every pass as it comes, the status saying it was asked).
    pub fn new(enabled: bool) -> Self {
        Self {
            graphs: RefCell::new(StepGraphs::new(enabled)),
        }
    }

    /// What the graphs did so far.
    pub fn status(&self) -> GraphStatus {
        self.graphs.borrow().status().clone()
    }

    /// `model`'s forward pass of `x` at `timesteps`: warmed up, captured or replayed.
    pub fn forward(&self, model: &UNet<B>, x: Tensor<B, 5>, timesteps: &[usize]) -> Tensor<B, 5> {
        let device = x.device();
        let sinusoid = model.sinusoid(timesteps, &device);
        let mut graphs = self.graphs.borrow_mut();
        if graphs.is_off() {
            return model.forward_sinusoid(x, sinusoid);
        }
        let inputs = vec![float(x.clone()), float(sinusoid.clone())];
        let mut step = |inputs: Vec<burn::tensor::ops::FloatTensor<B>>| {
            let [x, s]: [_; 2] = inputs.try_into().expect("two inputs");
            vec![float(model.forward_sinusoid(tensor(x), tensor(s)))]
        };
        match graphs.run(x.dims(), &device, inputs, &mut step, || ()) {
            Ok(mut out) => tensor(out.remove(0)),
            Err(_) => model.forward_sinusoid(x, sinusoid),
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
