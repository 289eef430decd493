//! Import of the reference's PyTorch checkpoints (`{'step', 'model', 'ema'}` dicts of
//! `GaussianDiffusion` state dicts) into [`UNet`].
//!
//! Our field names mirror the reference keys, so the import is a rename table: strip
//! `denoise_fn.`, name the `nn.Sequential` slots, and route each `TimestepEmbedSequential`
//! slot to the part it holds. burn-store's PyTorch adapter transposes Linear weights and maps
//! GroupNorm `weight`/`bias` to `gamma`/`beta`.

use std::collections::HashMap;
use std::path::Path;

use burn::tensor::backend::Backend;
use burn_store::pytorch::PytorchReader;
use burn_store::{ApplyError, ModuleSnapshot, PyTorchToBurnAdapter, TensorSnapshot};
use medddpm_diffusion::CosineSchedule;

use crate::{UNet, UNetError};

/// Which weights of a reference checkpoint to load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightsEntry {
    /// The EMA weights, which the reference samples with.
    #[default]
    Ema,
    /// The live training weights.
    Model,
}

impl WeightsEntry {
    /// The checkpoint dict key.
    pub fn key(self) -> &'static str {
        match self {
            Self::Ema => "ema",
            Self::Model => "model",
        }
    }
}

/// The 13 schedule buffers a reference state dict carries next to the network weights.
pub const SCHEDULE_BUFFERS: [&str; 13] = [
    "betas",
    "alphas_cumprod",
    "alphas_cumprod_prev",
    "sqrt_alphas_cumprod",
    "sqrt_one_minus_alphas_cumprod",
    "log_one_minus_alphas_cumprod",
    "sqrt_recip_alphas_cumprod",
    "sqrt_recipm1_alphas_cumprod",
    "posterior_variance",
    "posterior_log_variance_clipped",
    "posterior_mean_coef1",
    "posterior_mean_coef2",
    "posterior_mean_coef3",
];

/// What an import found besides the weights.
#[derive(Debug, Clone)]
pub struct ImportReport {
    /// Number of network tensors loaded.
    pub tensors_loaded: usize,
    /// Number of diffusion steps T of the embedded schedule, if the checkpoint has one.
    pub timesteps: Option<usize>,
    /// Largest relative difference between the checkpoint's schedule buffers and the cosine
    /// schedule with the same T (f32 rounding gives about 1e-6; `posterior_mean_coef3`, dead in
    /// the reference, is not compared).
    pub schedule_max_rel_error: Option<f64>,
    /// The embedded betas (f32 values as stored), for a caller that wants the exact schedule.
    pub betas: Option<Vec<f64>>,
}

/// Maps a reference U-Net key (without `denoise_fn.`) to our module path, or `None` if the key
/// is not part of the reference architecture.
pub fn reference_key_to_path(key: &str) -> Option<String> {
    let s: Vec<&str> = key.split('.').collect();
    let param = |p: &str| matches!(p, "weight" | "bias");
    let out = match s.as_slice() {
        ["time_embed", "0", p] if param(p) => format!("time_embed.linear_1.{p}"),
        ["time_embed", "2", p] if param(p) => format!("time_embed.linear_2.{p}"),
        ["out", "0", p] if param(p) => format!("out.norm.{}", norm_param(p)),
        ["out", "2", p] if param(p) => format!("out.conv.{p}"),
        ["middle_block", slot, rest @ ..] => {
            let part = match *slot {
                "0" => format!("res_1.{}", res_block_path(rest)?),
                "1" => format!("attn.{}", attention_path(rest)?),
                "2" => format!("res_2.{}", res_block_path(rest)?),
                _ => return None,
            };
            format!("middle_block.{part}")
        }
        [blocks @ ("input_blocks" | "output_blocks"), n, slot, rest @ ..] => {
            n.parse::<usize>().ok()?;
            slot.parse::<usize>().ok()?;
            let part = match rest {
                [p] if *blocks == "input_blocks" && *n == "0" && *slot == "0" && param(p) => {
                    format!("conv.{p}")
                }
                ["in_layers" | "emb_layers" | "out_layers" | "skip_connection", ..]
                    if *slot == "0" =>
                {
                    format!("res.{}", res_block_path(rest)?)
                }
                ["norm" | "qkv" | "proj_out", ..] if *slot == "1" => {
                    format!("attn.{}", attention_path(rest)?)
                }
                ["op", p] if *slot == "0" && param(p) => format!("down.op.{p}"),
                ["conv", p] if *slot != "0" && param(p) => format!("up.conv.{p}"),
                _ => return None,
            };
            format!("{blocks}.{n}.{part}")
        }
        _ => return None,
    };
    Some(out)
}

fn res_block_path(rest: &[&str]) -> Option<String> {
    let p = *rest.last()?;
    if !matches!(p, "weight" | "bias") {
        return None;
    }
    let sub = match &rest[..rest.len() - 1] {
        ["in_layers", "0"] => "in_layers.norm",
        ["in_layers", "2"] => "in_layers.conv",
        ["emb_layers", "1"] => "emb_layers.linear",
        ["out_layers", "0"] => "out_layers.norm",
        ["out_layers", "3"] => "out_layers.conv",
        ["skip_connection"] => "skip_connection",
        _ => return None,
    };
    let p = if sub.ends_with("norm") {
        norm_param(p)
    } else {
        p
    };
    Some(format!("{sub}.{p}"))
}

/// burn's GroupNorm names its affine parameters `gamma` and `beta`.
fn norm_param(p: &str) -> &str {
    match p {
        "weight" => "gamma",
        "bias" => "beta",
        other => other,
    }
}

fn attention_path(rest: &[&str]) -> Option<String> {
    match rest {
        ["norm", p @ ("weight" | "bias")] => Some(format!("norm.{}", norm_param(p))),
        [m @ ("qkv" | "proj_out"), p @ ("weight" | "bias")] => Some(format!("{m}.{p}")),
        _ => None,
    }
}

fn read_error(path: &Path, message: impl ToString) -> UNetError {
    UNetError::CheckpointRead {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// Reads one entry (`ema` or `model`) of a reference checkpoint into `unet`.
///
/// Every tensor of the network must be present with the right shape and every key of the entry
/// must be used (the 13 schedule buffers are checked against the cosine schedule instead);
/// anything else is an error that names the checkpoint and the keys.
pub fn load_reference_checkpoint<B: Backend>(
    mut unet: UNet<B>,
    path: impl AsRef<Path>,
    entry: WeightsEntry,
) -> Result<(UNet<B>, ImportReport), UNetError> {
    let path = path.as_ref();
    if !path.is_file() {
        return Err(read_error(path, "no such file"));
    }
    let reader = PytorchReader::with_top_level_key(path, entry.key()).map_err(|e| {
        read_error(
            path,
            format!(
                "cannot read entry '{}' as a PyTorch state dict: {e}",
                entry.key()
            ),
        )
    })?;
    let routed = route_tensors(path, reader.into_tensors())?;
    let loaded = apply_weights(&mut unet, path, routed.weights, &routed.origin)?;
    let report = schedule_report(path, &routed.buffers, loaded)?;
    Ok((unet, report))
}

/// A checkpoint entry's tensors sorted by where they go.
struct Routed {
    /// Network weights, renamed to our module paths.
    weights: Vec<TensorSnapshot>,
    /// The schedule buffers, under their checkpoint names.
    buffers: HashMap<String, TensorSnapshot>,
    /// Our module path -> the checkpoint key it came from, for error messages.
    origin: HashMap<String, String>,
}

/// Renames every `denoise_fn.` tensor to our module path and sets the schedule buffers aside;
/// any other key, or a network key with no place in our modules, is an error listing them all.
fn route_tensors(
    path: &Path,
    tensors: impl IntoIterator<Item = (String, TensorSnapshot)>,
) -> Result<Routed, UNetError> {
    let mut unexpected = Vec::new();
    let mut routed = Routed {
        weights: Vec::new(),
        buffers: HashMap::new(),
        origin: HashMap::new(),
    };
    for (key, mut snapshot) in tensors {
        let Some(inner) = key.strip_prefix("denoise_fn.") else {
            if SCHEDULE_BUFFERS.contains(&key.as_str()) {
                routed.buffers.insert(key, snapshot);
            } else {
                unexpected.push(key);
            }
            continue;
        };
        let Some(ours) = reference_key_to_path(inner) else {
            unexpected.push(key);
            continue;
        };
        snapshot.path_stack = Some(ours.split('.').map(String::from).collect());
        snapshot.container_stack = None;
        snapshot.tensor_id = None;
        routed.origin.insert(ours, key);
        routed.weights.push(snapshot);
    }
    if !unexpected.is_empty() {
        unexpected.sort();
        return Err(UNetError::UnexpectedKeys {
            path: path.to_path_buf(),
            keys: unexpected,
        });
    }
    Ok(routed)
}

/// Loads `weights` into `unet` and returns how many were applied; a shape mismatch, a missing
/// parameter or an unused tensor is an error naming the checkpoint keys (`origin`).
fn apply_weights<B: Backend>(
    unet: &mut UNet<B>,
    path: &Path,
    weights: Vec<TensorSnapshot>,
    origin: &HashMap<String, String>,
) -> Result<usize, UNetError> {
    let result = unet.apply(weights, None, Some(Box::new(PyTorchToBurnAdapter)), false);
    if let Some(err) = result.errors.first() {
        let name = |p: &str| origin.get(p).cloned().unwrap_or_else(|| p.to_string());
        return Err(match err {
            ApplyError::ShapeMismatch {
                path: p,
                expected,
                found,
            } => UNetError::ShapeMismatch {
                path: path.to_path_buf(),
                key: name(p),
                expected: expected.to_vec(),
                found: found.to_vec(),
            },
            other => read_error(path, other),
        });
    }
    if !result.missing.is_empty() {
        let mut keys: Vec<String> = result.missing.iter().map(|(p, _)| p.clone()).collect();
        keys.sort();
        return Err(UNetError::MissingKeys {
            path: path.to_path_buf(),
            keys,
        });
    }
    if !result.unused.is_empty() {
        let mut keys: Vec<String> = result
            .unused
            .iter()
            .map(|p| origin.get(p).cloned().unwrap_or_else(|| p.clone()))
            .collect();
        keys.sort();
        return Err(UNetError::UnexpectedKeys {
            path: path.to_path_buf(),
            keys,
        });
    }
    Ok(result.applied.len())
}

fn buffer_values(
    path: &Path,
    name: &str,
    snapshot: &TensorSnapshot,
) -> Result<Vec<f64>, UNetError> {
    let data = snapshot
        .to_data()
        .map_err(|e| read_error(path, format!("buffer '{name}': {e:?}")))?;
    data.convert::<f64>()
        .to_vec::<f64>()
        .map_err(|e| read_error(path, format!("buffer '{name}': {e:?}")))
}

fn schedule_report(
    path: &Path,
    buffers: &HashMap<String, TensorSnapshot>,
    tensors_loaded: usize,
) -> Result<ImportReport, UNetError> {
    let Some(betas_snapshot) = buffers.get("betas") else {
        return Ok(ImportReport {
            tensors_loaded,
            timesteps: None,
            schedule_max_rel_error: None,
            betas: None,
        });
    };
    let betas = buffer_values(path, "betas", betas_snapshot)?;
    let schedule = CosineSchedule::new(betas.len());
    let mut worst = 0.0f64;
    for (name, ours) in schedule.named_buffers() {
        let Some(snapshot) = buffers.get(name) else {
            continue;
        };
        let theirs = buffer_values(path, name, snapshot)?;
        if theirs.len() != ours.len() {
            return Err(read_error(
                path,
                format!(
                    "buffer '{name}' has {} entries, betas has {}",
                    theirs.len(),
                    ours.len()
                ),
            ));
        }
        for (a, b) in ours.iter().zip(&theirs) {
            // ln(1e-20) and values near zero: compare relative to max(|a|, 1e-6).
            worst = worst.max((a - b).abs() / a.abs().max(1e-6));
        }
    }
    Ok(ImportReport {
        tensors_loaded,
        timesteps: Some(betas.len()),
        schedule_max_rel_error: Some(worst),
        betas: Some(betas),
    })
}
