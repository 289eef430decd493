//! The evaluation entry point and its serialisable report.
//!
//! JSON has no infinity, so a PSNR of identical volumes is stored as `None` (`null`), and shown
//! as "inf" in Markdown; every other `None` in the report means "undefined", as documented on
//! its field.
//!
//! - `input`: what [`evaluate`] takes ([`EvalInput`] and its named images and label maps);
//! - `sections`: what it returns ([`EvalReport`] and one type per section);
//! - `evaluate`: the computation, one step per section;
//! - `markdown`: [`EvalReport::to_markdown`].

mod evaluate;
mod input;
mod markdown;
mod sections;

pub use evaluate::evaluate;
pub use input::{EvalInput, NamedImage, NamedLabels};
pub use sections::{
    AdherenceSection, ClassSummary, DiversityRow, DiversitySection, EvalReport, LabelAdherence,
    MmdSection, PairedMeans, PairedRow, PairedSection, SampleAdherence,
};
