//! The names of the files a synthesis run keeps beside its data set, in one place.

/// The merged manifest: one line per finished pair.
pub const MANIFEST_FILE: &str = "manifest.jsonl";

/// The settings the data set was made with.
pub const SETTINGS_FILE: &str = "synthesize.json";

/// The part of the manifest process `rank` appends to while several processes run.
pub fn part_name(rank: usize) -> String {
    format!("manifest.rank-{rank}.jsonl")
}
