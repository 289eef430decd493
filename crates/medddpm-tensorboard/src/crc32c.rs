//! CRC-32C (Castagnoli), the checksum TFRecord frames carry, and TensorFlow's masking of it.
//!
//! Local rather than a crate: a 256-entry table and two lines of arithmetic.

/// The reflected Castagnoli polynomial (0x1EDC6F41 bit-reversed).
const POLY: u32 = 0x82F6_3B78;

/// Byte-at-a-time lookup table, built at compile time.
const TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// CRC-32C of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc = TABLE[((crc ^ b as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// TensorFlow's masked CRC-32C (`tensorflow/core/lib/hash/crc32c.h`, `Mask`): rotated and
/// offset, so that a CRC stored inside CRC-protected data does not checksum to a constant.
pub fn masked_crc32c(bytes: &[u8]) -> u32 {
    let crc = crc32c(bytes);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        // The check value of CRC-32C (Koopman's and RFC 3720's catalogues).
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
        // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of 0xff, and an ascending run.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62A8_AB43);
        let ascending: Vec<u8> = (0u8..32).collect();
        assert_eq!(crc32c(&ascending), 0x46DD_794E);
    }

    #[test]
    // The test spells the mask as TensorFlow's source writes it, against our rotate.
    #[allow(clippy::manual_rotate)]
    fn mask_is_rotate_and_offset() {
        let crc = crc32c(b"123456789");
        let expected = ((crc >> 15) | (crc << 17)).wrapping_add(0xa282_ead8);
        assert_eq!(masked_crc32c(b"123456789"), expected);
        // Values from TensorBoard's own Python implementation
        // (`tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c`): the data, and
        // the length fields of an empty record and of a 24-byte one.
        assert_eq!(masked_crc32c(b"123456789"), 0xC78A_B0E5);
        assert_eq!(masked_crc32c(&0u64.to_le_bytes()), 0x0798_0329);
        assert_eq!(masked_crc32c(&24u64.to_le_bytes()), 0x224B_7FA3);
    }
}
