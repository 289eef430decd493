//! The crate's error type.

/// Bad input to a metric. Every check that could otherwise panic (an index out of range, a
/// division by an empty count) is reported as one of these instead, naming what was wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum MetricsError {
    /// Two inputs that must cover the same voxels (or features) have different lengths.
    #[error("{what}: length {got} does not match the expected {expected}")]
    LengthMismatch {
        /// Which input, e.g. "second volume" or "mask".
        what: String,
        /// Length required by the other inputs or by `dims`.
        expected: usize,
        /// Length found.
        got: usize,
    },
    /// `dims` does not describe the data (product differs from the data length).
    #[error("{what}: dims {dims:?} hold {voxels} voxels but the data has {len}")]
    DimsMismatch {
        /// Which input.
        what: String,
        /// Dims given.
        dims: [usize; 3],
        /// `dims[0] * dims[1] * dims[2]`.
        voxels: usize,
        /// Length of the data.
        len: usize,
    },
    /// An input that needs at least one element has none (an empty volume or set).
    #[error("{what} is empty")]
    Empty {
        /// Which input.
        what: String,
    },
    /// A mask selects no voxels, so a mean over it is undefined.
    #[error("{what}: the mask selects no voxels")]
    EmptyMask {
        /// Which mask or region.
        what: String,
    },
    /// The volume (at some MS-SSIM scale) is smaller than the Gaussian window along an axis.
    #[error(
        "volume of dims {dims:?} is {scale_dims:?} at scale {scale} of {scales}, smaller than \
         the {window}-voxel window along an axis; use fewer scales, a smaller sigma or a larger volume"
    )]
    TooSmall {
        /// Dims of the input volume.
        dims: [usize; 3],
        /// Dims at the failing scale.
        scale_dims: [usize; 3],
        /// 1-based scale that fails (1 for plain SSIM).
        scale: usize,
        /// Number of scales asked for.
        scales: usize,
        /// Window width in voxels (`2 * radius + 1`).
        window: usize,
    },
    /// Fewer items than a statistic needs (e.g. one sample for pairwise MS-SSIM).
    #[error("{what}: needs at least {needed}, got {got}")]
    TooFew {
        /// What is being counted.
        what: String,
        /// Minimum required.
        needed: usize,
        /// Number given.
        got: usize,
    },
    /// A parameter is out of its domain (non-positive data range, zero scales, ...).
    #[error("invalid {name} = {value}: {reason}")]
    InvalidParameter {
        /// Parameter name.
        name: &'static str,
        /// Value given, formatted.
        value: String,
        /// What is allowed.
        reason: &'static str,
    },
    /// A volume holds NaN or infinite voxels, so every score of it would be NaN.
    #[error("{what}: {count} voxel(s) are NaN or infinite")]
    NonFinite {
        /// Which volume.
        what: String,
        /// How many voxels are not finite.
        count: usize,
    },
    /// A caller's loader could not provide a volume (a file that does not read, a grid that
    /// cannot be matched); `reason` is the loader's own message.
    #[error("{name}: {reason}")]
    Load {
        /// The volume's name, as the loader gave it.
        name: String,
        /// Why it failed.
        reason: String,
    },
    /// An error about one named item of an [`crate::EvalInput`], so the user knows which file
    /// to look at.
    #[error("{context}: {source}")]
    Context {
        /// The item, e.g. "synthetic 'sample_3_0' vs real 'sample_3'".
        context: String,
        /// The underlying error.
        source: Box<MetricsError>,
    },
}

impl MetricsError {
    /// Wraps `self` with the name of the item it concerns.
    pub fn context(self, context: impl Into<String>) -> Self {
        MetricsError::Context {
            context: context.into(),
            source: Box::new(self),
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = MetricsError> = std::result::Result<T, E>;

pub(crate) fn check_len(what: &str, expected: usize, got: usize) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(MetricsError::LengthMismatch {
            what: what.to_string(),
            expected,
            got,
        })
    }
}

/// A grid's voxel count, refused when it overflows or is empty.
pub(crate) fn check_grid(dims: [usize; 3]) -> Result<usize> {
    let n = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| MetricsError::InvalidParameter {
            name: "dims",
            value: format!("{dims:?}"),
            reason: "grid has more voxels than fit in memory",
        })?;
    check_dims("grid", dims, n)?;
    Ok(n)
}

pub(crate) fn check_dims(what: &str, dims: [usize; 3], len: usize) -> Result<()> {
    let voxels = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .unwrap_or(usize::MAX);
    if voxels != len {
        return Err(MetricsError::DimsMismatch {
            what: what.to_string(),
            dims,
            voxels,
            len,
        });
    }
    if len == 0 {
        return Err(MetricsError::Empty {
            what: what.to_string(),
        });
    }
    Ok(())
}

pub(crate) fn check_data_range(data_range: f64) -> Result<()> {
    if data_range.is_finite() && data_range > 0.0 {
        Ok(())
    } else {
        Err(MetricsError::InvalidParameter {
            name: "data_range",
            value: data_range.to_string(),
            reason: "must be finite and > 0 (2.0 for images in [-1, 1])",
        })
    }
}

pub(crate) fn check_finite(what: &str, data: &[f32]) -> Result<()> {
    let count = data.iter().filter(|v| !v.is_finite()).count();
    if count == 0 {
        Ok(())
    } else {
        Err(MetricsError::NonFinite {
            what: what.to_string(),
            count,
        })
    }
}
