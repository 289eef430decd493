//! TFRecord framing, the container of event files: each record is its length (u64,
//! little-endian), the masked CRC-32C of those 8 bytes, the data, and the masked CRC-32C of the
//! data (`tensorflow/core/lib/io/record_writer.cc`).

use crate::crc32c::masked_crc32c;

/// Bytes a record adds around its data.
pub const OVERHEAD: usize = 8 + 4 + 4;

/// Appends `data` to `out` as one record.
pub fn frame(out: &mut Vec<u8>, data: &[u8]) {
    let len = (data.len() as u64).to_le_bytes();
    out.reserve(data.len() + OVERHEAD);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
}

/// Why the records of a file do not read: the byte offset of the record and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameError {
    /// Where the bad record starts.
    pub offset: u64,
    /// What is wrong with it.
    pub problem: &'static str,
}

/// The data of every record in `bytes`, each checked against both of its CRCs. A file that
/// ends inside a record is an error too: this reader is for finished files and tests, where
/// half a record means a writer did not flush.
pub fn unframe(bytes: &[u8]) -> Result<Vec<&[u8]>, FrameError> {
    let mut records = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let fail = |problem| FrameError {
            offset: at as u64,
            problem,
        };
        let rest = &bytes[at..];
        if rest.len() < 12 {
            return Err(fail("the file ends inside a record's header"));
        }
        let (len_bytes, rest) = rest.split_at(8);
        let (len_crc, rest) = rest.split_at(4);
        if masked_crc32c(len_bytes) != u32::from_le_bytes(len_crc.try_into().unwrap()) {
            return Err(fail("the length's CRC does not match"));
        }
        let len = u64::from_le_bytes(len_bytes.try_into().unwrap());
        let len = usize::try_from(len)
            .ok()
            .filter(|&n| n <= rest.len().saturating_sub(4))
            .ok_or_else(|| fail("the file ends inside a record's data"))?;
        let (data, rest) = rest.split_at(len);
        if masked_crc32c(data) != u32::from_le_bytes(rest[..4].try_into().unwrap()) {
            return Err(fail("the data's CRC does not match"));
        }
        records.push(data);
        at += len + OVERHEAD;
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let mut file = Vec::new();
        frame(&mut file, b"");
        frame(&mut file, b"hello");
        frame(&mut file, &[7u8; 1000]);
        assert_eq!(file.len(), 3 * OVERHEAD + 5 + 1000);
        let records = unframe(&file).unwrap();
        assert_eq!(records, [&b""[..], b"hello", &[7u8; 1000][..]]);
    }

    #[test]
    fn empty_record_bytes() {
        // Length 0, its masked CRC (0x07980329, from TensorBoard's Python CRC), no data, and
        // the masked CRC of no bytes.
        let mut file = Vec::new();
        frame(&mut file, b"");
        assert_eq!(
            &file[..12],
            &[0, 0, 0, 0, 0, 0, 0, 0, 0x29, 0x03, 0x98, 0x07]
        );
    }

    #[test]
    fn damage_is_found() {
        let mut file = Vec::new();
        frame(&mut file, b"first");
        let second = file.len() as u64;
        frame(&mut file, b"second");

        let mut flipped = file.clone();
        flipped[second as usize + 14] ^= 1;
        let err = unframe(&flipped).unwrap_err();
        assert_eq!(
            (err.offset, err.problem),
            (second, "the data's CRC does not match")
        );

        let mut bad_len = file.clone();
        bad_len[0] = 9;
        assert_eq!(
            unframe(&bad_len).unwrap_err().problem,
            "the length's CRC does not match"
        );

        let cut = &file[..file.len() - 3];
        let err = unframe(cut).unwrap_err();
        assert_eq!(
            (err.offset, err.problem),
            (second, "the file ends inside a record's data")
        );
        let cut = &file[..second as usize + 5];
        assert_eq!(
            unframe(cut).unwrap_err().problem,
            "the file ends inside a record's header"
        );
    }
}
