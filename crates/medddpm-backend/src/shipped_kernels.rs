//! Machine code (CUBIN) shipped in the binary for the kernels of the default whole-head run on
//! compute capability 9.0 (H100, H200), so that a fresh machine neither compiles them with NVRTC
//! nor has the driver compile their PTX.
//!
//! Each is found by a hash of the architecture option and the CUDA source it was compiled from
//! (the vendored cubecl-cuda's `shipped.rs`): a kernel whose code changed since the archive was
//! made, or another GPU model, finds nothing and is compiled as before. The archive is opened
//! only when a kernel is missing from the run's PTX cache. Made by `scripts/ship-kernels.sh` from
//! a run with `MEDDDPM_EXPORT_KERNELS`.

use std::collections::HashMap;
use std::io::Read;

/// A gzipped tar of `<key>.cubin` files, the key in 32 hexadecimal digits.
const SHIPPED: &[u8] = include_bytes!("../tuning/sm90-cuda-kernels.tar.gz");

/// The archive's CUBINs by key. A broken archive is a warning and nothing shipped: every kernel
/// is then compiled, as on a GPU the archive was not made for.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn table() -> HashMap<u128, Vec<u8>> {
    match unpack(SHIPPED) {
        Ok(table) => table,
        Err(err) => {
            log::warn!("the kernels shipped in the binary are unreadable ({err}); compiling them");
            HashMap::new()
        }
    }
}

fn unpack(archive: &[u8]) -> std::io::Result<HashMap<u128, Vec<u8>>> {
    let mut table = HashMap::new();
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(archive));
    for entry in tar.entries()? {
        let mut entry = entry?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry.path()?.to_string_lossy().to_string();
        let name = path.rsplit('/').next().unwrap_or("");
        let Some(key) = name
            .strip_suffix(".cubin")
            .and_then(|hex| u128::from_str_radix(hex, 16).ok())
        else {
            return Err(std::io::Error::other(format!("unexpected entry {path}")));
        };
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes)?;
        table.insert(key, bytes);
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ELF's magic number: what the driver looks for in a CUBIN.
    const ELF: &[u8] = b"\x7fELF";

    #[test]
    fn the_shipped_archive_holds_cubins_by_key() {
        let table = unpack(SHIPPED).unwrap();
        assert!(!table.is_empty());
        for bytes in table.values() {
            assert!(bytes.starts_with(ELF), "not a CUBIN");
        }
    }

    #[test]
    fn an_entry_not_named_by_a_key_breaks_the_archive() {
        let mut tar = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_ustar();
        header.set_size(4);
        header.set_cksum();
        tar.append_data(&mut header, "kernel.ptx", ELF).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &tar.into_inner().unwrap()).unwrap();
        let err = unpack(&gz.finish().unwrap()).unwrap_err();
        assert!(err.to_string().contains("kernel.ptx"), "{err}");
    }
}
