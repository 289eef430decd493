//! The cosine noise schedule (Nichol & Dhariwal 2021, eq. 17) and every buffer derived from it.

use serde::{Deserialize, Serialize};

/// Offset `s` of the cosine schedule; keeps beta_0 from being vanishingly small.
pub const COSINE_S: f64 = 0.008;
/// Upper bound on every beta, so the last step cannot collapse abar to exactly zero.
pub const MAX_BETA: f64 = 0.999;
/// Floor under the posterior variance before its logarithm (var_0 is exactly 0).
pub const LOG_VARIANCE_FLOOR: f64 = 1e-20;

/// Settings of the noise schedule. Defaults equal the reference's shell scripts (T = 250).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScheduleConfig {
    /// Number of diffusion steps T. The released checkpoints embed T = 250.
    pub timesteps: usize,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        Self { timesteps: 250 }
    }
}

/// The cosine schedule and its derived buffers, all in f64 and all of length T.
///
/// Field names are those of the reference checkpoint's buffers, so that a loaded checkpoint can
/// be checked buffer by buffer. Tensors are made from these only at the edge
/// ([`CosineSchedule::extract`]), so the coefficient math never loses precision in f32.
#[derive(Debug, Clone, PartialEq)]
pub struct CosineSchedule {
    /// beta_t, clipped to at most [`MAX_BETA`].
    pub betas: Vec<f64>,
    /// alpha_t = 1 - beta_t.
    pub alphas: Vec<f64>,
    /// abar_t = prod_{s <= t} alpha_s, recomputed from the clipped betas.
    pub alphas_cumprod: Vec<f64>,
    /// abar_{t-1}, with abar_{-1} = 1.
    pub alphas_cumprod_prev: Vec<f64>,
    /// sqrt(abar_t): the signal scale of `q_sample`.
    pub sqrt_alphas_cumprod: Vec<f64>,
    /// sqrt(1 - abar_t): the noise scale of `q_sample`.
    pub sqrt_one_minus_alphas_cumprod: Vec<f64>,
    /// ln(1 - abar_t).
    pub log_one_minus_alphas_cumprod: Vec<f64>,
    /// sqrt(1 / abar_t), used to recover x0 from eps.
    pub sqrt_recip_alphas_cumprod: Vec<f64>,
    /// sqrt(1 / abar_t - 1), used to recover x0 from eps.
    pub sqrt_recipm1_alphas_cumprod: Vec<f64>,
    /// Variance of q(x_{t-1} | x_t, x0): beta_t (1 - abar_{t-1}) / (1 - abar_t); 0 at t = 0.
    pub posterior_variance: Vec<f64>,
    /// ln(max(posterior_variance, 1e-20)). The reference floors index 0 (it does not copy index 1
    /// as guided-diffusion does).
    pub posterior_log_variance_clipped: Vec<f64>,
    /// Weight of x0 in the posterior mean: beta_t sqrt(abar_{t-1}) / (1 - abar_t).
    pub posterior_mean_coef1: Vec<f64>,
    /// Weight of x_t in the posterior mean: (1 - abar_{t-1}) sqrt(alpha_t) / (1 - abar_t).
    pub posterior_mean_coef2: Vec<f64>,
}

impl CosineSchedule {
    /// Builds the schedule for `timesteps` steps.
    ///
    /// # Panics
    /// If `timesteps` is 0 (a schedule needs at least one step; configs validate this first).
    pub fn new(timesteps: usize) -> Self {
        assert!(
            timesteps > 0,
            "a diffusion schedule needs at least one timestep"
        );
        let t_max = timesteps as f64;
        let f = |i: usize| {
            let x =
                ((i as f64 / t_max) + COSINE_S) / (1.0 + COSINE_S) * std::f64::consts::FRAC_PI_2;
            x.cos().powi(2)
        };
        let f0 = f(0);
        let abar_grid: Vec<f64> = (0..=timesteps).map(|i| f(i) / f0).collect();
        let betas: Vec<f64> = (0..timesteps)
            .map(|t| (1.0 - abar_grid[t + 1] / abar_grid[t]).clamp(0.0, MAX_BETA))
            .collect();
        Self::from_betas(betas)
    }

    /// Derives every buffer from a given beta sequence (the cosine betas, or a checkpoint's).
    pub fn from_betas(betas: Vec<f64>) -> Self {
        let alphas: Vec<f64> = betas.iter().map(|b| 1.0 - b).collect();
        let mut alphas_cumprod = Vec::with_capacity(betas.len());
        let mut acc = 1.0;
        for a in &alphas {
            acc *= a;
            alphas_cumprod.push(acc);
        }
        let alphas_cumprod_prev: Vec<f64> = std::iter::once(1.0)
            .chain(
                alphas_cumprod
                    .iter()
                    .copied()
                    .take(betas.len().saturating_sub(1)),
            )
            .collect();
        let map = |v: &[f64], f: &dyn Fn(f64) -> f64| v.iter().map(|&x| f(x)).collect::<Vec<_>>();
        let posterior_variance: Vec<f64> = (0..betas.len())
            .map(|t| betas[t] * (1.0 - alphas_cumprod_prev[t]) / (1.0 - alphas_cumprod[t]))
            .collect();
        let posterior_mean_coef1 = (0..betas.len())
            .map(|t| betas[t] * alphas_cumprod_prev[t].sqrt() / (1.0 - alphas_cumprod[t]))
            .collect();
        let posterior_mean_coef2 = (0..betas.len())
            .map(|t| (1.0 - alphas_cumprod_prev[t]) * alphas[t].sqrt() / (1.0 - alphas_cumprod[t]))
            .collect();
        Self {
            sqrt_alphas_cumprod: map(&alphas_cumprod, &f64::sqrt),
            sqrt_one_minus_alphas_cumprod: map(&alphas_cumprod, &|a| (1.0 - a).sqrt()),
            log_one_minus_alphas_cumprod: map(&alphas_cumprod, &|a| (1.0 - a).ln()),
            sqrt_recip_alphas_cumprod: map(&alphas_cumprod, &|a| (1.0 / a).sqrt()),
            sqrt_recipm1_alphas_cumprod: map(&alphas_cumprod, &|a| (1.0 / a - 1.0).sqrt()),
            posterior_log_variance_clipped: map(&posterior_variance, &|v| {
                v.max(LOG_VARIANCE_FLOOR).ln()
            }),
            posterior_variance,
            posterior_mean_coef1,
            posterior_mean_coef2,
            betas,
            alphas,
            alphas_cumprod,
            alphas_cumprod_prev,
        }
    }

    /// Number of diffusion steps T.
    pub fn num_timesteps(&self) -> usize {
        self.betas.len()
    }

    /// The buffers under their checkpoint names, for comparison with a reference checkpoint.
    ///
    /// `posterior_mean_coef3` is absent: it is dead code in the reference and never used.
    pub fn named_buffers(&self) -> Vec<(&'static str, &[f64])> {
        vec![
            ("betas", &self.betas),
            ("alphas_cumprod", &self.alphas_cumprod),
            ("alphas_cumprod_prev", &self.alphas_cumprod_prev),
            ("sqrt_alphas_cumprod", &self.sqrt_alphas_cumprod),
            (
                "sqrt_one_minus_alphas_cumprod",
                &self.sqrt_one_minus_alphas_cumprod,
            ),
            (
                "log_one_minus_alphas_cumprod",
                &self.log_one_minus_alphas_cumprod,
            ),
            ("sqrt_recip_alphas_cumprod", &self.sqrt_recip_alphas_cumprod),
            (
                "sqrt_recipm1_alphas_cumprod",
                &self.sqrt_recipm1_alphas_cumprod,
            ),
            ("posterior_variance", &self.posterior_variance),
            (
                "posterior_log_variance_clipped",
                &self.posterior_log_variance_clipped,
            ),
            ("posterior_mean_coef1", &self.posterior_mean_coef1),
            ("posterior_mean_coef2", &self.posterior_mean_coef2),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs()
    }

    /// Test vectors of the reference with T = 250 (spec sections 2.1 and 10).
    #[test]
    fn cosine_schedule_matches_reference_values() {
        let s = CosineSchedule::new(250);
        assert_eq!(s.num_timesteps(), 250);
        assert!(
            close(s.betas[0], 1.9427e-4, 1e-4),
            "beta_0 = {}",
            s.betas[0]
        );
        assert!(
            close(s.betas[1], 2.7199e-4, 1e-4),
            "beta_1 = {}",
            s.betas[1]
        );
        assert!(
            close(s.betas[247], 0.5555, 1e-3),
            "beta_247 = {}",
            s.betas[247]
        );
        assert!(
            close(s.betas[248], 0.7500, 1e-3),
            "beta_248 = {}",
            s.betas[248]
        );
        assert_eq!(s.betas[249], MAX_BETA);
        assert!(close(s.alphas_cumprod[249], 3.9e-8, 0.05));
        assert!(close(s.posterior_variance[1], 1.13338e-4, 1e-4));
        assert_eq!(s.posterior_variance[0], 0.0);
        assert!(close(
            s.posterior_log_variance_clipped[0],
            (1e-20f64).ln(),
            1e-12
        ));
        assert!(close(s.posterior_log_variance_clipped[1], -9.08513, 1e-5));
        // At t = 0 the posterior mean is exactly x0: coef1 = 1, coef2 = 0.
        assert!(close(s.posterior_mean_coef1[0], 1.0, 1e-12));
        assert_eq!(s.posterior_mean_coef2[0], 0.0);
    }

    #[test]
    fn buffers_are_consistent() {
        let s = CosineSchedule::new(1000);
        for t in 0..1000 {
            assert!(s.betas[t] > 0.0 && s.betas[t] <= MAX_BETA);
            let recon =
                s.sqrt_alphas_cumprod[t].powi(2) + s.sqrt_one_minus_alphas_cumprod[t].powi(2);
            assert!((recon - 1.0).abs() < 1e-12);
            assert!(t == 0 || s.alphas_cumprod[t] < s.alphas_cumprod[t - 1]);
        }
        assert_eq!(s.named_buffers().len(), 12);
    }
}
