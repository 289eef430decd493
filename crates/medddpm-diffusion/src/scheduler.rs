//! The reverse process in diffusers' shape: a [`Scheduler`] gives the timesteps and one `step`,
//! and its provided `sample` is the one loop every sampler runs.

use burn::tensor::{backend::Backend, Distribution, Tensor};

use crate::process::{network_input, Denoiser, Prediction};
use crate::schedule::CosineSchedule;

/// Result of one reverse step.
#[derive(Debug, Clone)]
pub struct StepOutput<B: Backend, const D: usize> {
    /// x_{t-1}.
    pub prev_sample: Tensor<B, D>,
    /// The clamped x0 estimate the step was built on.
    pub pred_original_sample: Tensor<B, D>,
    /// Mean of p(x_{t-1} | x_t).
    pub mean: Tensor<B, D>,
    /// Log-variance of p(x_{t-1} | x_t): minus infinity where the step adds no noise.
    pub log_variance: f64,
}

impl<B: Backend, const D: usize> StepOutput<B, D> {
    /// A stochastic step's output: `noise` times `std` added to `mean`, or `mean` itself where
    /// `std` is `None` (the steps that add no noise).
    pub(crate) fn noised(
        mean: Tensor<B, D>,
        x0: Tensor<B, D>,
        log_variance: f64,
        noise: Tensor<B, D>,
        std: Option<f64>,
    ) -> Self {
        let prev_sample = match std {
            Some(std) => mean.clone() + noise.mul_scalar(std),
            None => mean.clone(),
        };
        Self {
            prev_sample,
            pred_original_sample: x0,
            mean,
            log_variance,
        }
    }
}

/// What every sampler walks and how it reads the network: one place for the fields and the x0
/// prediction the samplers share.
#[derive(Debug, Clone)]
pub struct Chain {
    /// The training schedule the timesteps index.
    pub schedule: CosineSchedule,
    /// Timesteps in the order they are visited, from T - 1 down.
    pub timesteps: Vec<usize>,
    /// Clamp x0 to [-1, 1] at every step (`clip_denoised=True` in the reference).
    pub clip_denoised: bool,
    /// What the network predicts (the reference's: the noise).
    pub prediction: Prediction,
}

impl Chain {
    /// The reference's reading (noise prediction, x0 clamped) over `timesteps`.
    pub fn new(schedule: CosineSchedule, timesteps: Vec<usize>) -> Self {
        Self {
            schedule,
            timesteps,
            clip_denoised: true,
            prediction: Prediction::Epsilon,
        }
    }

    /// x0 from the noise estimate at timestep `t`: `sqrt(1/abar_t) x_t - sqrt(1/abar_t - 1) eps`,
    /// clamped where asked (the data lives in [-1, 1]; clamping keeps early, poor estimates in
    /// range).
    pub fn x0<B: Backend, const D: usize>(
        &self,
        eps: Tensor<B, D>,
        t: usize,
        x_t: Tensor<B, D>,
    ) -> Tensor<B, D> {
        let s = &self.schedule;
        let x0 = x_t.mul_scalar(s.sqrt_recip_alphas_cumprod[t])
            - eps.mul_scalar(s.sqrt_recipm1_alphas_cumprod[t]);
        if self.clip_denoised {
            x0.clamp(-1.0, 1.0)
        } else {
            x0
        }
    }
}

/// What one reverse step starts from.
pub struct StepInput<B: Backend> {
    /// The noise the network predicted (read as noise whatever its target).
    pub eps: Tensor<B, 5>,
    /// The timestep of `x_t`.
    pub t: usize,
    /// The next visited timestep; `None` after the last (the step then gives x0). The driver,
    /// which walks the list, knows it.
    pub next: Option<usize>,
    /// The sample at `t`.
    pub x_t: Tensor<B, 5>,
    /// The step's z, passed in so that tests can supply it (zeros where it adds no noise).
    pub noise: Tensor<B, 5>,
}

/// A reverse process as diffusers splits it: the scheduler never sees the model, so one driver
/// ([`Scheduler::sample`]) serves every sampler and tests can step one by hand.
pub trait Scheduler {
    /// What one run carries from step to step: a multistep solver's history, `()` for the
    /// samplers that need only the current sample. A fresh one starts every run, so a
    /// scheduler can be shared between runs.
    type State<B: Backend>: Default;

    /// The schedule, timesteps and reading of the network this scheduler walks with.
    fn chain(&self) -> &Chain;

    /// Whether the step from `t` to `next` (the next visited timestep, `None` after the last)
    /// adds noise. Where it does not, the driver passes zeros without drawing, so that a
    /// deterministic sampler leaves the generator as it found it.
    fn adds_noise(&self, t: usize, next: Option<usize>) -> bool;

    /// One step from `input.x_t` at `input.t` to `input.next` (see [`StepInput`]).
    fn step<B: Backend>(&self, input: StepInput<B>, state: &mut Self::State<B>)
        -> StepOutput<B, 5>;

    /// The training schedule the timesteps index.
    fn schedule(&self) -> &CosineSchedule {
        &self.chain().schedule
    }

    /// What the network predicts; the driver turns it into the noise `step` takes.
    fn prediction(&self) -> Prediction {
        self.chain().prediction
    }

    /// Timesteps in the order they are visited, from T - 1 down.
    fn timesteps(&self) -> &[usize] {
        &self.chain().timesteps
    }

    /// The timestep visited after `t`, `None` after the last.
    fn prev_timestep(&self, t: usize) -> Option<usize> {
        let ts = self.timesteps();
        let i = ts.iter().position(|&s| s == t)?;
        ts.get(i + 1).copied()
    }

    /// Network calls per sample.
    fn num_steps(&self) -> usize {
        self.timesteps().len()
    }

    /// Runs the reverse process from pure noise, conditioned on `cond`, and returns x_0.
    ///
    /// `image_channels` is the number of channels to generate; `on_step` is called after every
    /// step with the number of steps done (for progress bars). Randomness comes from the
    /// backend's generator: seed it with `B::seed` for reproducible samples.
    fn sample<B: Backend, M: Denoiser<B>>(
        &self,
        denoiser: &M,
        cond: Tensor<B, 5>,
        image_channels: usize,
        mut on_step: impl FnMut(usize),
    ) -> Tensor<B, 5> {
        self.sample_observed(denoiser, cond, image_channels, |i, _| on_step(i))
    }

    /// As `sample`, with `on_step` also shown the sample after each step (x_t on its way to
    /// x_0), for pictures of the denoising.
    fn sample_observed<B: Backend, M: Denoiser<B>>(
        &self,
        denoiser: &M,
        cond: Tensor<B, 5>,
        image_channels: usize,
        on_step: impl FnMut(usize, &Tensor<B, 5>),
    ) -> Tensor<B, 5> {
        let [b, _, d, h, w] = cond.dims();
        let device = cond.device();
        let shape = [b, image_channels, d, h, w];
        let x = Tensor::<B, 5>::random(shape, Distribution::Normal(0.0, 1.0), &device);
        let draw = |_: usize| Tensor::random(shape, Distribution::Normal(0.0, 1.0), &device);
        self.sample_from(denoiser, cond, x, draw, on_step)
    }

    /// As `sample_observed`, from the given pure noise `x` (x_T, `[b, image channels, d, h,
    /// w]`) and with the z of step `i` (0-based) from `draw(i)`, asked only for the steps that
    /// add noise: for callers that draw each example's noise from a stream of its own, so that
    /// an example of a batch gets the sample it would get alone (`medddpm synthesize`).
    fn sample_from<B: Backend, M: Denoiser<B>>(
        &self,
        denoiser: &M,
        cond: Tensor<B, 5>,
        mut x: Tensor<B, 5>,
        mut draw: impl FnMut(usize) -> Tensor<B, 5>,
        mut on_step: impl FnMut(usize, &Tensor<B, 5>),
    ) -> Tensor<B, 5> {
        let shape = x.dims();
        let device = x.device();
        let b = shape[0];
        let mut state = Self::State::<B>::default();
        let timesteps = self.timesteps();
        for (i, &t) in timesteps.iter().enumerate() {
            let next = timesteps.get(i + 1).copied();
            let input = network_input(x.clone(), Some(cond.clone()));
            let output = denoiser.predict_noise(input, &vec![t; b]);
            let eps = self
                .prediction()
                .to_noise(self.schedule(), output, t, x.clone());
            let noise = if self.adds_noise(t, next) {
                draw(i)
            } else {
                Tensor::zeros(shape, &device)
            };
            let input = StepInput {
                eps,
                t,
                next,
                x_t: x,
                noise,
            };
            x = self.step(input, &mut state).prev_sample;
            on_step(i + 1, &x);
        }
        x
    }
}
