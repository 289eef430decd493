//! Pipeline switches of the tensor-core kernels (how deep they stage, how much of the
//! reduction one step takes, the register cap on CUDA): one process-wide setting, so that the
//! kernel benchmark (`benches/conv.rs`) can time each choice on the same operands, and so that
//! a researcher can try one on their GPU (`MEDDDPM_CONV_TUNING`) without a rebuild. The
//! defaults are what measured fastest on an H100 (docs/benchmarks); a choice the device's
//! shared memory cannot hold falls back to one stage and 32-channel steps.

use std::fmt;
use std::sync::RwLock;

/// How the tensor-core convolution kernels pipeline their reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConvTuning {
    /// Shared-memory stages of the forward/data-gradient kernel: 2 stages the next step's
    /// operands while this step's products run, with one barrier a step instead of two.
    pub stages: u32,
    /// Input channels per step of the forward/data-gradient kernel where a channels-last
    /// input has at least that many (32 or 64; fewer channels take 32 or 16).
    pub k_step: u32,
    /// Registers per unit the CUDA compiler may give the forward/data-gradient kernel (0: no
    /// cap). 128 lets two 256-unit cubes share an SM.
    pub max_registers: u32,
    /// Shared-memory stages of the weight gradient's vector kernel (1 or 2).
    pub wgrad_stages: u32,
    /// Columns per unit of the weight gradient's tensor-core tiles where `N` passes 128
    /// (8: 128-column tiles; 16: 256-column tiles, half the re-reads of `dy`).
    pub wgrad_tn: usize,
    /// Cubes per SM the weight gradient's split of K aims for (whole waves: rounded down).
    pub wgrad_cubes: u32,
    /// Registers per unit the CUDA compiler may give the weight gradient's vector kernel (0:
    /// no cap).
    pub wgrad_max_registers: u32,
    /// The forward/data-gradient kernel's products through `ldmatrix` and `mma.sync` where the
    /// runtime has them (CUDA), instead of cooperative matrices.
    pub ldmatrix: bool,
    /// Staged rows of the tensor-core kernels dealt to units so that one store phase's rows
    /// fall in disjoint shared-memory banks (see `gemm::a_slot`, `wgrad_mma_vec::staged_row`).
    pub rotate: bool,
}

/// What measured fastest on an H100 (docs/benchmarks): the register cap
/// (two cubes per SM instead of one) and the weight gradient's two stages; two stages or
/// 64-channel steps in the forward kernel, and 256-column weight-gradient tiles, were slower.
impl Default for ConvTuning {
    fn default() -> Self {
        ConvTuning {
            stages: 1,
            k_step: 32,
            max_registers: 128,
            wgrad_stages: 2,
            wgrad_tn: 8,
            wgrad_cubes: 8,
            wgrad_max_registers: 0,
            ldmatrix: true,
            rotate: true,
        }
    }
}

/// Why a `MEDDDPM_CONV_TUNING` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MEDDDPM_CONV_TUNING: {0} (expected e.g. \"stages=2,k_step=64,max_registers=128,wgrad_stages=2,wgrad_tn=16\")")]
pub struct TuningError(String);

impl ConvTuning {
    /// Parses `key=value` pairs separated by commas over the defaults.
    pub fn parse(text: &str) -> Result<ConvTuning, TuningError> {
        let mut t = ConvTuning::default();
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| TuningError(format!("`{pair}` is not key=value")))?;
            let n: u32 = value
                .trim()
                .parse()
                .map_err(|_| TuningError(format!("`{value}` is not a number")))?;
            let allowed = |ok: bool| {
                ok.then_some(n)
                    .ok_or_else(|| TuningError(format!("{key}={n} is not allowed")))
            };
            match key.trim() {
                "stages" => t.stages = allowed(n == 1 || n == 2)?,
                "k_step" => t.k_step = allowed(n == 32 || n == 64)?,
                "max_registers" => t.max_registers = allowed(n == 0 || (64..=255).contains(&n))?,
                "wgrad_stages" => t.wgrad_stages = allowed(n == 1 || n == 2)?,
                "wgrad_tn" => t.wgrad_tn = allowed(n == 8 || n == 16)? as usize,
                "wgrad_cubes" => t.wgrad_cubes = allowed((1..=64).contains(&n))?,
                "wgrad_max_registers" => {
                    t.wgrad_max_registers = allowed(n == 0 || (64..=255).contains(&n))?
                }
                "ldmatrix" => t.ldmatrix = allowed(n <= 1)? == 1,
                "rotate" => t.rotate = allowed(n <= 1)? == 1,
                other => return Err(TuningError(format!("unknown key `{other}`"))),
            }
        }
        Ok(t)
    }
}

/// Every switch as `key=value` pairs, the text [`ConvTuning::parse`] reads back.
impl fmt::Display for ConvTuning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stages={},k_step={},max_registers={},wgrad_stages={},wgrad_tn={},wgrad_cubes={},\
             wgrad_max_registers={},ldmatrix={},rotate={}",
            self.stages,
            self.k_step,
            self.max_registers,
            self.wgrad_stages,
            self.wgrad_tn,
            self.wgrad_cubes,
            self.wgrad_max_registers,
            u32::from(self.ldmatrix),
            u32::from(self.rotate)
        )
    }
}

static TUNING: RwLock<Option<ConvTuning>> = RwLock::new(None);

/// The setting in force: the last [`set_conv_tuning`], else `MEDDDPM_CONV_TUNING` (read once;
/// a value that does not parse is reported and ignored), else the defaults.
pub fn conv_tuning() -> ConvTuning {
    if let Some(t) = *TUNING.read().unwrap_or_else(|e| e.into_inner()) {
        return t;
    }
    let mut slot = TUNING.write().unwrap_or_else(|e| e.into_inner());
    *slot.get_or_insert_with(|| match std::env::var("MEDDDPM_CONV_TUNING") {
        Ok(text) => ConvTuning::parse(&text).unwrap_or_else(|e| {
            log::warn!("{e}; using the defaults");
            ConvTuning::default()
        }),
        Err(_) => ConvTuning::default(),
    })
}

/// Sets the pipeline of every tensor-core convolution launched from now on in this process.
pub fn set_conv_tuning(tuning: ConvTuning) {
    *TUNING.write().unwrap_or_else(|e| e.into_inner()) = Some(tuning);
}

#[cfg(test)]
mod tests {
    use super::ConvTuning;

    #[test]
    fn parses_pairs_over_the_defaults_and_refuses_the_rest() {
        let t = ConvTuning::parse("stages=2, wgrad_tn=16").expect("valid");
        assert_eq!(t.stages, 2);
        assert_eq!(t.wgrad_tn, 16);
        assert_eq!(t.k_step, ConvTuning::default().k_step);
        assert_eq!(ConvTuning::parse("").expect("empty"), ConvTuning::default());
        assert_eq!(ConvTuning::parse(&t.to_string()).expect("its own text"), t);
        let t = ConvTuning::parse("ldmatrix=0,rotate=0,wgrad_cubes=16,wgrad_max_registers=128")
            .expect("valid");
        assert!(!t.ldmatrix && !t.rotate);
        assert_eq!((t.wgrad_cubes, t.wgrad_max_registers), (16, 128));
        assert_eq!(ConvTuning::parse(&t.to_string()).expect("its own text"), t);
        for bad in [
            "stages=3",
            "k_step=48",
            "wgrad_cubes=0",
            "wgrad_max_registers=32",
            "ldmatrix=2",
            "wgrad_tn",
            "speed=2",
            "stages=x",
        ] {
            assert!(ConvTuning::parse(bad).is_err(), "{bad}");
        }
    }
}
