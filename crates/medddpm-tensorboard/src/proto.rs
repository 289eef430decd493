//! The few protocol-buffer wire rules the event format needs, by hand: varints, field keys,
//! length-delimited fields and little-endian fixed-width numbers. Encoding appends to a byte
//! vector; decoding walks a message's fields and hands each to the caller.

/// Wire type of varint fields (int32, int64, enums).
pub const VARINT: u8 = 0;
/// Wire type of 8-byte fields (double).
pub const FIXED64: u8 = 1;
/// Wire type of strings, bytes and embedded messages.
pub const LEN: u8 = 2;
/// Wire type of 4-byte fields (float).
pub const FIXED32: u8 = 5;

/// Appends `v` as a base-128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_key(out: &mut Vec<u8>, field: u32, wire: u8) {
    put_varint(out, ((field as u64) << 3) | wire as u64);
}

/// A varint field. Negative int64 values take ten bytes, as protobuf encodes them.
pub fn put_int(out: &mut Vec<u8>, field: u32, v: i64) {
    put_key(out, field, VARINT);
    put_varint(out, v as u64);
}

/// A double field.
pub fn put_double(out: &mut Vec<u8>, field: u32, v: f64) {
    put_key(out, field, FIXED64);
    out.extend_from_slice(&v.to_le_bytes());
}

/// A float field.
pub fn put_float(out: &mut Vec<u8>, field: u32, v: f32) {
    put_key(out, field, FIXED32);
    out.extend_from_slice(&v.to_le_bytes());
}

/// A string, bytes or embedded-message field (`bytes` is the message already encoded).
pub fn put_bytes(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_key(out, field, LEN);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// One decoded field: its number and its value in wire form.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Field<'a> {
    /// A varint field's value.
    Varint(u32, u64),
    /// An 8-byte field's value.
    Fixed64(u32, [u8; 8]),
    /// A length-delimited field's bytes.
    Bytes(u32, &'a [u8]),
    /// A 4-byte field's value.
    Fixed32(u32, [u8; 4]),
}

/// Why a message does not decode (the reader adds where it was).
pub type WireError = &'static str;

/// The fields of an encoded message, in order; stops at the first malformed one.
pub fn fields(mut bytes: &[u8]) -> impl Iterator<Item = Result<Field<'_>, WireError>> {
    let mut failed = false;
    std::iter::from_fn(move || {
        if bytes.is_empty() || failed {
            return None;
        }
        let field = next_field(&mut bytes);
        failed = field.is_err();
        Some(field)
    })
}

fn next_field<'a>(bytes: &mut &'a [u8]) -> Result<Field<'a>, WireError> {
    let key = take_varint(bytes)?;
    let number = u32::try_from(key >> 3).map_err(|_| "field number out of range")?;
    match (key & 7) as u8 {
        VARINT => Ok(Field::Varint(number, take_varint(bytes)?)),
        FIXED64 => Ok(Field::Fixed64(number, take(bytes, 8)?.try_into().unwrap())),
        LEN => {
            let len = usize::try_from(take_varint(bytes)?).map_err(|_| "length out of range")?;
            Ok(Field::Bytes(number, take(bytes, len)?))
        }
        FIXED32 => Ok(Field::Fixed32(number, take(bytes, 4)?.try_into().unwrap())),
        _ => Err("unsupported wire type (groups are not used by event files)"),
    }
}

fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Result<&'a [u8], WireError> {
    if bytes.len() < n {
        return Err("field runs past the end of its message");
    }
    let (head, rest) = bytes.split_at(n);
    *bytes = rest;
    Ok(head)
}

fn take_varint(bytes: &mut &[u8]) -> Result<u64, WireError> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let [b, rest @ ..] = *bytes else {
            return Err("varint runs past the end of its message");
        };
        *bytes = rest;
        v |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("varint longer than ten bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_match_protobuf() {
        // The protobuf encoding guide's examples: 1, 150, and -1 as int64 (ten bytes).
        let mut out = Vec::new();
        put_varint(&mut out, 1);
        put_varint(&mut out, 150);
        assert_eq!(out, [0x01, 0x96, 0x01]);
        let mut neg = Vec::new();
        put_int(&mut neg, 2, -1);
        assert_eq!(neg[0], 0x10);
        assert_eq!(
            &neg[1..],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
    }

    #[test]
    fn fields_round_trip() {
        let mut out = Vec::new();
        put_int(&mut out, 2, 123_456_789_012);
        put_double(&mut out, 1, 1.5);
        put_float(&mut out, 2, -0.25);
        put_bytes(&mut out, 3, b"brain.Event:2");
        put_int(&mut out, 200, -7);
        let got: Vec<Field<'_>> = fields(&out).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            got,
            [
                Field::Varint(2, 123_456_789_012),
                Field::Fixed64(1, 1.5f64.to_le_bytes()),
                Field::Fixed32(2, (-0.25f32).to_le_bytes()),
                Field::Bytes(3, b"brain.Event:2"),
                Field::Varint(200, (-7i64) as u64),
            ]
        );
    }

    #[test]
    fn truncated_messages_are_errors() {
        let mut out = Vec::new();
        put_bytes(&mut out, 3, b"abcdef");
        let cut = &out[..out.len() - 2];
        let got: Vec<_> = fields(cut).collect();
        assert_eq!(got, [Err("field runs past the end of its message")]);
        assert_eq!(
            fields(&[0x08]).collect::<Vec<_>>(),
            [Err("varint runs past the end of its message")]
        );
        assert_eq!(
            fields(&[0x0b]).collect::<Vec<_>>(),
            [Err(
                "unsupported wire type (groups are not used by event files)"
            )]
        );
    }
}
