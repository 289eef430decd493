//! The messages of an event file (`tensorboard/compat/proto/event.proto`, `summary.proto`,
//! `tensor.proto`), only the fields this crate writes, encoded and decoded by hand. Field
//! numbers, as TensorBoard 2.21's descriptors give them:
//!
//! ```text
//! Event          wall_time 1 (double)  step 2 (int64)  file_version 3 (string)
//!                summary 5 (Summary)   session_log 7 (SessionLog { status 1: START = 1 })
//! Summary        value 1 (repeated Value)
//! Value          tag 1  simple_value 2 (float)  image 4 (Image)  tensor 8  metadata 9
//! Image          height 1  width 2  colorspace 3  encoded_image_string 4 (PNG bytes)
//! SummaryMetadata  plugin_data 1 { plugin_name 1 }
//! TensorProto    dtype 1 (DT_STRING = 7)  tensor_shape 2 ({} = a scalar)  string_val 8
//! ```

use crate::proto::{fields, put_bytes, put_double, put_float, put_int, Field, WireError};

/// What the first record of every event file says (TensorFlow's `kVersionPrefix` and version 2,
/// which tells readers that `SessionLog.START` marks a restart).
pub const FILE_VERSION: &str = "brain.Event:2";

/// The plugin that shows text summaries (markdown).
pub const TEXT_PLUGIN: &str = "text";

/// `DataType::DT_STRING` of `types.proto`.
const DT_STRING: u64 = 7;
/// `SessionLog::START`.
const SESSION_START: u64 = 1;
/// `Summary.Image.colorspace` of RGB pictures.
pub const RGB: u32 = 3;

/// One record of an event file.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Seconds since the Unix epoch when the event was written.
    pub wall_time: f64,
    /// The training step the event belongs to.
    pub step: i64,
    /// What it carries.
    pub what: What,
}

/// The payload of an [`Event`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum What {
    /// The file's first record: its format version.
    FileVersion(String),
    /// Values logged at the event's step.
    Summary(Vec<Value>),
    /// A session (re)started at this step: readers drop what earlier sessions logged at this
    /// step and later (TensorBoard's restart rule), as a resumed run trains those steps again.
    SessionStart,
    /// A payload this crate does not write (a graph, a log message), by field number.
    Other(u32),
}

/// One tagged value of a summary.
#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    /// The name TensorBoard groups and plots by, e.g. `train/loss`.
    pub tag: String,
    /// The value.
    pub data: Data,
}

/// The kinds of value this crate writes.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Data {
    /// A number (`simple_value`), shown in the Scalars tab.
    Scalar(f32),
    /// An encoded picture, shown in the Images tab.
    Image(Image),
    /// Markdown, a string tensor of the text plugin, shown in the Text tab.
    Text(String),
    /// A value of another kind, by the field number that carried it.
    Other(u32),
}

/// An encoded picture (`Summary.Image`).
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    /// Pixels down.
    pub height: u32,
    /// Pixels across.
    pub width: u32,
    /// 1 grey, 3 RGB, 4 RGBA.
    pub colorspace: u32,
    /// The PNG file's bytes.
    pub png: Vec<u8>,
}

impl Event {
    /// The event as protobuf bytes (a record's data).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_double(&mut out, 1, self.wall_time);
        put_int(&mut out, 2, self.step);
        match &self.what {
            What::FileVersion(v) => put_bytes(&mut out, 3, v.as_bytes()),
            What::Summary(values) => {
                let mut summary = Vec::new();
                for v in values {
                    put_bytes(&mut summary, 1, &v.encode());
                }
                put_bytes(&mut out, 5, &summary);
            }
            What::SessionStart => {
                let mut log = Vec::new();
                put_int(&mut log, 1, SESSION_START as i64);
                put_bytes(&mut out, 7, &log);
            }
            What::Other(_) => {}
        }
        out
    }

    /// Decodes a record's data; fields this crate does not know are skipped.
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut event = Event {
            wall_time: 0.0,
            step: 0,
            what: What::Other(0),
        };
        for field in fields(bytes) {
            match field? {
                Field::Fixed64(1, b) => event.wall_time = f64::from_le_bytes(b),
                Field::Varint(2, v) => event.step = v as i64,
                Field::Bytes(3, b) => event.what = What::FileVersion(utf8(b)?),
                Field::Bytes(5, b) => event.what = What::Summary(decode_summary(b)?),
                Field::Bytes(7, b) if session_status(b)? == Some(SESSION_START) => {
                    event.what = What::SessionStart
                }
                Field::Bytes(n, _) if n != 1 && n != 2 => event.what = What::Other(n),
                _ => {}
            }
        }
        Ok(event)
    }
}

impl Value {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_bytes(&mut out, 1, self.tag.as_bytes());
        match &self.data {
            Data::Scalar(x) => put_float(&mut out, 2, *x),
            Data::Image(image) => {
                let mut m = Vec::new();
                put_int(&mut m, 1, image.height as i64);
                put_int(&mut m, 2, image.width as i64);
                put_int(&mut m, 3, image.colorspace as i64);
                put_bytes(&mut m, 4, &image.png);
                put_bytes(&mut out, 4, &m);
            }
            Data::Text(markdown) => {
                let mut tensor = Vec::new();
                put_int(&mut tensor, 1, DT_STRING as i64);
                put_bytes(&mut tensor, 2, &[]);
                put_bytes(&mut tensor, 8, markdown.as_bytes());
                put_bytes(&mut out, 8, &tensor);
                let mut plugin = Vec::new();
                put_bytes(&mut plugin, 1, TEXT_PLUGIN.as_bytes());
                let mut metadata = Vec::new();
                put_bytes(&mut metadata, 1, &plugin);
                put_bytes(&mut out, 9, &metadata);
            }
            Data::Other(_) => {}
        }
        out
    }
}

fn decode_summary(bytes: &[u8]) -> Result<Vec<Value>, WireError> {
    let mut values = Vec::new();
    for field in fields(bytes) {
        if let Field::Bytes(1, b) = field? {
            values.push(decode_value(b)?);
        }
    }
    Ok(values)
}

fn decode_value(bytes: &[u8]) -> Result<Value, WireError> {
    let mut tag = String::new();
    let mut data = Data::Other(0);
    let (mut tensor, mut plugin) = (None, None);
    for field in fields(bytes) {
        match field? {
            Field::Bytes(1, b) => tag = utf8(b)?,
            Field::Fixed32(2, b) => data = Data::Scalar(f32::from_le_bytes(b)),
            Field::Bytes(4, b) => data = Data::Image(decode_image(b)?),
            Field::Bytes(8, b) => tensor = Some(b),
            Field::Bytes(9, b) => plugin = plugin_name(b)?,
            Field::Bytes(n, _) => data = Data::Other(n),
            _ => {}
        }
    }
    if let Some(t) = tensor {
        data = match plugin.as_deref() {
            Some(TEXT_PLUGIN) => Data::Text(decode_text(t)?),
            _ => Data::Other(8),
        };
    }
    Ok(Value { tag, data })
}

fn decode_image(bytes: &[u8]) -> Result<Image, WireError> {
    let mut image = Image {
        height: 0,
        width: 0,
        colorspace: 0,
        png: Vec::new(),
    };
    for field in fields(bytes) {
        match field? {
            Field::Varint(1, v) => image.height = v as u32,
            Field::Varint(2, v) => image.width = v as u32,
            Field::Varint(3, v) => image.colorspace = v as u32,
            Field::Bytes(4, b) => image.png = b.to_vec(),
            _ => {}
        }
    }
    Ok(image)
}

/// The single string of a scalar `DT_STRING` tensor.
fn decode_text(bytes: &[u8]) -> Result<String, WireError> {
    let (mut dtype, mut strings) = (0, Vec::new());
    for field in fields(bytes) {
        match field? {
            Field::Varint(1, v) => dtype = v,
            Field::Bytes(8, b) => strings.push(b),
            _ => {}
        }
    }
    match (dtype, strings.as_slice()) {
        (DT_STRING, [one]) => utf8(one),
        (DT_STRING, _) => Err("a text value holds other than one string"),
        _ => Err("a text value's tensor is not DT_STRING"),
    }
}

fn plugin_name(metadata: &[u8]) -> Result<Option<String>, WireError> {
    for field in fields(metadata) {
        if let Field::Bytes(1, plugin_data) = field? {
            for inner in fields(plugin_data) {
                if let Field::Bytes(1, name) = inner? {
                    return Ok(Some(utf8(name)?));
                }
            }
        }
    }
    Ok(None)
}

fn session_status(bytes: &[u8]) -> Result<Option<u64>, WireError> {
    for field in fields(bytes) {
        if let Field::Varint(1, status) = field? {
            return Ok(Some(status));
        }
    }
    Ok(None)
}

fn utf8(bytes: &[u8]) -> Result<String, WireError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "a string field is not UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(event: Event) {
        let bytes = event.encode();
        assert_eq!(Event::decode(&bytes).unwrap(), event);
    }

    #[test]
    fn every_kind_round_trips() {
        round_trip(Event {
            wall_time: 1_700_000_000.25,
            step: 0,
            what: What::FileVersion(FILE_VERSION.into()),
        });
        round_trip(Event {
            wall_time: 2.0,
            step: 41,
            what: What::SessionStart,
        });
        let image = Image {
            height: 2,
            width: 3,
            colorspace: RGB,
            png: vec![0x89, b'P', b'N', b'G', 0, 1, 2],
        };
        round_trip(Event {
            wall_time: 3.5,
            step: 1 << 40,
            what: What::Summary(vec![
                Value {
                    tag: "train/loss".into(),
                    data: Data::Scalar(0.125),
                },
                Value {
                    tag: "samples/a/axial".into(),
                    data: Data::Image(image),
                },
                Value {
                    tag: "settings".into(),
                    data: Data::Text("# run\n`lr = 1e-5` – ü".into()),
                },
            ]),
        });
    }

    #[test]
    fn scalar_bytes_are_protobufs() {
        // Written out by hand from the descriptors: Event { wall_time: 1.0, step: 3,
        // summary { value { tag: "a", simple_value: 2.0 } } }.
        let event = Event {
            wall_time: 1.0,
            step: 3,
            what: What::Summary(vec![Value {
                tag: "a".into(),
                data: Data::Scalar(2.0),
            }]),
        };
        let mut expected = vec![0x09];
        expected.extend_from_slice(&1.0f64.to_le_bytes());
        expected.extend_from_slice(&[0x10, 3, 0x2a, 10, 0x0a, 8, 0x0a, 1, b'a', 0x15]);
        expected.extend_from_slice(&2.0f32.to_le_bytes());
        assert_eq!(event.encode(), expected);
    }

    #[test]
    fn text_without_its_plugin_is_not_text() {
        let mut tensor = Vec::new();
        put_int(&mut tensor, 1, DT_STRING as i64);
        put_bytes(&mut tensor, 8, b"x");
        let mut value = Vec::new();
        put_bytes(&mut value, 1, b"t");
        put_bytes(&mut value, 8, &tensor);
        assert_eq!(decode_value(&value).unwrap().data, Data::Other(8));
    }
}
