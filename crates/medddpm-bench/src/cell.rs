//! One configuration of the benchmark matrix, as the logs, the records and the exit message name
//! it.

use std::fmt;

use medddpm_backend::{BackendKind, Precision};
use medddpm_unet::Layout;

/// One cell of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    /// Backend.
    pub backend: BackendKind,
    /// Precision.
    pub precision: Precision,
    /// Layout.
    pub layout: Layout,
}

impl fmt::Display for Cell {
    /// `backend/precision/layout`, as the logs and the exit message name a configuration.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.backend, self.precision, self.layout)
    }
}
