//! The raw 348-byte NIfTI-1 header, its datatypes and byte order.

use std::fmt;

/// Size of a NIfTI-1 header in bytes.
pub const NIFTI1_HEADER_SIZE: usize = 348;
/// Offset of the voxel data in a single-file NIfTI-1 written by this crate (header + 4 extension bytes).
pub const NIFTI1_VOX_OFFSET: usize = 352;

/// Byte order of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Endian {
    /// Least significant byte first (what every current tool writes).
    #[default]
    Little,
    /// Most significant byte first (old SGI/Sun files; also used by tests of the reader).
    Big,
}

/// Voxel storage type of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DataType {
    /// `uint8`, code 2.
    U8,
    /// `int8`, code 256.
    I8,
    /// `int16`, code 4.
    I16,
    /// `uint16`, code 512.
    U16,
    /// `int32`, code 8.
    I32,
    /// `uint32`, code 768.
    U32,
    /// `int64`, code 1024.
    I64,
    /// `uint64`, code 1280.
    U64,
    /// `float32`, code 16.
    F32,
    /// `float64`, code 64.
    F64,
}

impl DataType {
    /// The NIfTI `datatype` code, or `None` for codes this crate cannot decode.
    pub fn from_code(code: i16) -> Option<Self> {
        Some(match code {
            2 => Self::U8,
            256 => Self::I8,
            4 => Self::I16,
            512 => Self::U16,
            8 => Self::I32,
            768 => Self::U32,
            1024 => Self::I64,
            1280 => Self::U64,
            16 => Self::F32,
            64 => Self::F64,
            _ => return None,
        })
    }

    /// The NIfTI `datatype` code.
    pub fn code(self) -> i16 {
        match self {
            Self::U8 => 2,
            Self::I8 => 256,
            Self::I16 => 4,
            Self::U16 => 512,
            Self::I32 => 8,
            Self::U32 => 768,
            Self::I64 => 1024,
            Self::U64 => 1280,
            Self::F32 => 16,
            Self::F64 => 64,
        }
    }

    /// Bytes per voxel.
    pub fn size(self) -> usize {
        match self {
            Self::U8 | Self::I8 => 1,
            Self::I16 | Self::U16 => 2,
            Self::I32 | Self::U32 | Self::F32 => 4,
            Self::I64 | Self::U64 | Self::F64 => 8,
        }
    }

    /// Whether the type stores integers (so written values are rounded and range-checked).
    pub fn is_integer(self) -> bool {
        !matches!(self, Self::F32 | Self::F64)
    }

    /// Inclusive value range of an integer type (as f64; 64-bit bounds are approximate).
    pub(crate) fn int_range(self) -> (f64, f64) {
        match self {
            Self::U8 => (0.0, u8::MAX as f64),
            Self::I8 => (i8::MIN as f64, i8::MAX as f64),
            Self::I16 => (i16::MIN as f64, i16::MAX as f64),
            Self::U16 => (0.0, u16::MAX as f64),
            Self::I32 => (i32::MIN as f64, i32::MAX as f64),
            Self::U32 => (0.0, u32::MAX as f64),
            Self::I64 => (i64::MIN as f64, i64::MAX as f64),
            Self::U64 => (0.0, u64::MAX as f64),
            Self::F32 | Self::F64 => (f64::NEG_INFINITY, f64::INFINITY),
        }
    }
}

/// Every field of a NIfTI-1 header, as stored (byte order already resolved).
///
/// Kept verbatim on [`crate::Volume`] so tools can print it and writers can carry over codes,
/// description and intent that this crate does not interpret.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // field names and meanings are those of nifti1.h
pub struct NiftiHeader {
    pub sizeof_hdr: i32,
    pub data_type: [u8; 10],
    pub db_name: [u8; 18],
    pub extents: i32,
    pub session_error: i16,
    pub regular: u8,
    pub dim_info: u8,
    pub dim: [i16; 8],
    pub intent_p1: f32,
    pub intent_p2: f32,
    pub intent_p3: f32,
    pub intent_code: i16,
    pub datatype: i16,
    pub bitpix: i16,
    pub slice_start: i16,
    pub pixdim: [f32; 8],
    pub vox_offset: f32,
    pub scl_slope: f32,
    pub scl_inter: f32,
    pub slice_end: i16,
    pub slice_code: u8,
    pub xyzt_units: u8,
    pub cal_max: f32,
    pub cal_min: f32,
    pub slice_duration: f32,
    pub toffset: f32,
    pub glmax: i32,
    pub glmin: i32,
    pub descrip: [u8; 80],
    pub aux_file: [u8; 24],
    pub qform_code: i16,
    pub sform_code: i16,
    pub quatern_b: f32,
    pub quatern_c: f32,
    pub quatern_d: f32,
    pub qoffset_x: f32,
    pub qoffset_y: f32,
    pub qoffset_z: f32,
    pub srow_x: [f32; 4],
    pub srow_y: [f32; 4],
    pub srow_z: [f32; 4],
    pub intent_name: [u8; 16],
    pub magic: [u8; 4],
}

impl Default for NiftiHeader {
    /// A blank single-file float32 header with unit spacing and no orientation codes.
    fn default() -> Self {
        Self {
            sizeof_hdr: NIFTI1_HEADER_SIZE as i32,
            data_type: [0; 10],
            db_name: [0; 18],
            extents: 0,
            session_error: 0,
            regular: b'r',
            dim_info: 0,
            dim: [3, 1, 1, 1, 1, 1, 1, 1],
            intent_p1: 0.0,
            intent_p2: 0.0,
            intent_p3: 0.0,
            intent_code: 0,
            datatype: DataType::F32.code(),
            bitpix: 32,
            slice_start: 0,
            pixdim: [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0],
            vox_offset: NIFTI1_VOX_OFFSET as f32,
            scl_slope: 1.0,
            scl_inter: 0.0,
            slice_end: 0,
            slice_code: 0,
            xyzt_units: 0,
            cal_max: 0.0,
            cal_min: 0.0,
            slice_duration: 0.0,
            toffset: 0.0,
            glmax: 0,
            glmin: 0,
            descrip: [0; 80],
            aux_file: [0; 24],
            qform_code: 0,
            sform_code: 0,
            quatern_b: 0.0,
            quatern_c: 0.0,
            quatern_d: 0.0,
            qoffset_x: 0.0,
            qoffset_y: 0.0,
            qoffset_z: 0.0,
            srow_x: [1.0, 0.0, 0.0, 0.0],
            srow_y: [0.0, 1.0, 0.0, 0.0],
            srow_z: [0.0, 0.0, 1.0, 0.0],
            intent_name: [0; 16],
            magic: *b"n+1\0",
        }
    }
}

/// Reads fixed-offset fields in one byte order.
struct Reader<'a> {
    b: &'a [u8],
    endian: Endian,
}

impl Reader<'_> {
    fn arr<const N: usize>(&self, off: usize) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&self.b[off..off + N]);
        a
    }
    fn i16(&self, off: usize) -> i16 {
        match self.endian {
            Endian::Little => i16::from_le_bytes(self.arr(off)),
            Endian::Big => i16::from_be_bytes(self.arr(off)),
        }
    }
    fn i32(&self, off: usize) -> i32 {
        match self.endian {
            Endian::Little => i32::from_le_bytes(self.arr(off)),
            Endian::Big => i32::from_be_bytes(self.arr(off)),
        }
    }
    fn f32(&self, off: usize) -> f32 {
        match self.endian {
            Endian::Little => f32::from_le_bytes(self.arr(off)),
            Endian::Big => f32::from_be_bytes(self.arr(off)),
        }
    }
    fn i16s<const N: usize>(&self, off: usize) -> [i16; N] {
        std::array::from_fn(|n| self.i16(off + 2 * n))
    }
    fn f32s<const N: usize>(&self, off: usize) -> [f32; N] {
        std::array::from_fn(|n| self.f32(off + 4 * n))
    }
}

/// Appends fields in one byte order.
struct Writer {
    b: Vec<u8>,
    endian: Endian,
}

impl Writer {
    fn bytes(&mut self, x: &[u8]) {
        self.b.extend_from_slice(x);
    }
    fn i16(&mut self, x: i16) {
        let a = match self.endian {
            Endian::Little => x.to_le_bytes(),
            Endian::Big => x.to_be_bytes(),
        };
        self.b.extend_from_slice(&a);
    }
    fn i32(&mut self, x: i32) {
        let a = match self.endian {
            Endian::Little => x.to_le_bytes(),
            Endian::Big => x.to_be_bytes(),
        };
        self.b.extend_from_slice(&a);
    }
    fn f32(&mut self, x: f32) {
        let a = match self.endian {
            Endian::Little => x.to_le_bytes(),
            Endian::Big => x.to_be_bytes(),
        };
        self.b.extend_from_slice(&a);
    }
}

/// What the first four bytes say about the header.
pub(crate) enum SizeofHdr {
    Nifti1(Endian),
    Nifti2,
    Unknown(i32),
}

/// Classifies a header by `sizeof_hdr`; the byte order is whichever reading gives 348.
pub(crate) fn detect(b: &[u8; 4]) -> SizeofHdr {
    let le = i32::from_le_bytes(*b);
    let be = i32::from_be_bytes(*b);
    if le == 348 {
        SizeofHdr::Nifti1(Endian::Little)
    } else if be == 348 {
        SizeofHdr::Nifti1(Endian::Big)
    } else if le == 540 || be == 540 {
        SizeofHdr::Nifti2
    } else {
        SizeofHdr::Unknown(le)
    }
}

impl NiftiHeader {
    /// Decodes the first 348 bytes of `b` in the given byte order (no validation).
    ///
    /// # Panics
    /// If `b` is shorter than 348 bytes; callers check the length first.
    pub(crate) fn parse(b: &[u8], endian: Endian) -> Self {
        let r = Reader { b, endian };
        Self {
            sizeof_hdr: r.i32(0),
            data_type: r.arr(4),
            db_name: r.arr(14),
            extents: r.i32(32),
            session_error: r.i16(36),
            regular: b[38],
            dim_info: b[39],
            dim: r.i16s(40),
            intent_p1: r.f32(56),
            intent_p2: r.f32(60),
            intent_p3: r.f32(64),
            intent_code: r.i16(68),
            datatype: r.i16(70),
            bitpix: r.i16(72),
            slice_start: r.i16(74),
            pixdim: r.f32s(76),
            vox_offset: r.f32(108),
            scl_slope: r.f32(112),
            scl_inter: r.f32(116),
            slice_end: r.i16(120),
            slice_code: b[122],
            xyzt_units: b[123],
            cal_max: r.f32(124),
            cal_min: r.f32(128),
            slice_duration: r.f32(132),
            toffset: r.f32(136),
            glmax: r.i32(140),
            glmin: r.i32(144),
            descrip: r.arr(148),
            aux_file: r.arr(228),
            qform_code: r.i16(252),
            sform_code: r.i16(254),
            quatern_b: r.f32(256),
            quatern_c: r.f32(260),
            quatern_d: r.f32(264),
            qoffset_x: r.f32(268),
            qoffset_y: r.f32(272),
            qoffset_z: r.f32(276),
            srow_x: r.f32s(280),
            srow_y: r.f32s(296),
            srow_z: r.f32s(312),
            intent_name: r.arr(328),
            magic: r.arr(344),
        }
    }

    /// Encodes the header as 348 bytes in the given byte order.
    pub(crate) fn to_bytes(&self, endian: Endian) -> Vec<u8> {
        let mut w = Writer {
            b: Vec::with_capacity(NIFTI1_HEADER_SIZE),
            endian,
        };
        w.i32(self.sizeof_hdr);
        w.bytes(&self.data_type);
        w.bytes(&self.db_name);
        w.i32(self.extents);
        w.i16(self.session_error);
        w.bytes(&[self.regular, self.dim_info]);
        self.dim.iter().for_each(|&d| w.i16(d));
        w.f32(self.intent_p1);
        w.f32(self.intent_p2);
        w.f32(self.intent_p3);
        w.i16(self.intent_code);
        w.i16(self.datatype);
        w.i16(self.bitpix);
        w.i16(self.slice_start);
        self.pixdim.iter().for_each(|&p| w.f32(p));
        w.f32(self.vox_offset);
        w.f32(self.scl_slope);
        w.f32(self.scl_inter);
        w.i16(self.slice_end);
        w.bytes(&[self.slice_code, self.xyzt_units]);
        w.f32(self.cal_max);
        w.f32(self.cal_min);
        w.f32(self.slice_duration);
        w.f32(self.toffset);
        w.i32(self.glmax);
        w.i32(self.glmin);
        w.bytes(&self.descrip);
        w.bytes(&self.aux_file);
        w.i16(self.qform_code);
        w.i16(self.sform_code);
        for x in [
            self.quatern_b,
            self.quatern_c,
            self.quatern_d,
            self.qoffset_x,
            self.qoffset_y,
            self.qoffset_z,
        ] {
            w.f32(x);
        }
        for row in [self.srow_x, self.srow_y, self.srow_z] {
            row.iter().for_each(|&x| w.f32(x));
        }
        w.bytes(&self.intent_name);
        w.bytes(&self.magic);
        debug_assert_eq!(w.b.len(), NIFTI1_HEADER_SIZE);
        w.b
    }

    /// The description string, up to its first NUL.
    pub fn descrip_str(&self) -> String {
        c_str(&self.descrip)
    }
}

fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

impl fmt::Display for NiftiHeader {
    /// One `name: value` line per field, in file order (what `medddpm inspect` prints).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "sizeof_hdr: {}", self.sizeof_hdr)?;
        writeln!(f, "data_type: {:?}", c_str(&self.data_type))?;
        writeln!(f, "db_name: {:?}", c_str(&self.db_name))?;
        writeln!(f, "extents: {}", self.extents)?;
        writeln!(f, "session_error: {}", self.session_error)?;
        writeln!(f, "regular: {}", self.regular)?;
        writeln!(f, "dim_info: {}", self.dim_info)?;
        writeln!(f, "dim: {:?}", self.dim)?;
        writeln!(
            f,
            "intent_p1/p2/p3: {} {} {}",
            self.intent_p1, self.intent_p2, self.intent_p3
        )?;
        writeln!(f, "intent_code: {}", self.intent_code)?;
        let dt = DataType::from_code(self.datatype)
            .map(|d| format!("{d:?}"))
            .unwrap_or_else(|| "unsupported".into());
        writeln!(f, "datatype: {} ({dt})", self.datatype)?;
        writeln!(f, "bitpix: {}", self.bitpix)?;
        writeln!(f, "slice_start: {}", self.slice_start)?;
        writeln!(f, "pixdim: {:?}", self.pixdim)?;
        writeln!(f, "vox_offset: {}", self.vox_offset)?;
        writeln!(f, "scl_slope: {}", self.scl_slope)?;
        writeln!(f, "scl_inter: {}", self.scl_inter)?;
        writeln!(f, "slice_end: {}", self.slice_end)?;
        writeln!(f, "slice_code: {}", self.slice_code)?;
        writeln!(f, "xyzt_units: {}", self.xyzt_units)?;
        writeln!(f, "cal_max: {}", self.cal_max)?;
        writeln!(f, "cal_min: {}", self.cal_min)?;
        writeln!(f, "slice_duration: {}", self.slice_duration)?;
        writeln!(f, "toffset: {}", self.toffset)?;
        writeln!(f, "glmax: {}", self.glmax)?;
        writeln!(f, "glmin: {}", self.glmin)?;
        writeln!(f, "descrip: {:?}", c_str(&self.descrip))?;
        writeln!(f, "aux_file: {:?}", c_str(&self.aux_file))?;
        writeln!(f, "qform_code: {}", self.qform_code)?;
        writeln!(f, "sform_code: {}", self.sform_code)?;
        writeln!(
            f,
            "quatern_b/c/d: {} {} {}",
            self.quatern_b, self.quatern_c, self.quatern_d
        )?;
        writeln!(
            f,
            "qoffset_x/y/z: {} {} {}",
            self.qoffset_x, self.qoffset_y, self.qoffset_z
        )?;
        writeln!(f, "srow_x: {:?}", self.srow_x)?;
        writeln!(f, "srow_y: {:?}", self.srow_y)?;
        writeln!(f, "srow_z: {:?}", self.srow_z)?;
        writeln!(f, "intent_name: {:?}", c_str(&self.intent_name))?;
        write!(f, "magic: {:?}", c_str(&self.magic))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_bytes_round_trip_in_both_orders() {
        let mut h = NiftiHeader {
            dim: [3, 5, 6, 7, 1, 1, 1, 1],
            pixdim: [-1.0, 1.5, 2.0, 2.5, 0.0, 0.0, 0.0, 0.0],
            srow_y: [0.0, 2.0, 0.0, -3.5],
            ..Default::default()
        };
        h.descrip[..4].copy_from_slice(b"test");
        for e in [Endian::Little, Endian::Big] {
            let b = h.to_bytes(e);
            assert_eq!(b.len(), NIFTI1_HEADER_SIZE);
            assert!(matches!(detect(&[b[0], b[1], b[2], b[3]]), SizeofHdr::Nifti1(x) if x == e));
            assert_eq!(NiftiHeader::parse(&b, e), h);
        }
        assert_eq!(h.descrip_str(), "test");
        assert!(h.to_string().contains("dim: [3, 5, 6, 7, 1, 1, 1, 1]"));
    }

    #[test]
    fn datatype_codes_round_trip() {
        use DataType::*;
        for d in [U8, I8, I16, U16, I32, U32, I64, U64, F32, F64] {
            assert_eq!(DataType::from_code(d.code()), Some(d));
        }
        assert_eq!(DataType::from_code(32), None); // complex64
    }
}
