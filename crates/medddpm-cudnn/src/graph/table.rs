//! The plan choices of a GPU model and the file that keeps them across runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::PlanChoice;

/// The plan choices of one GPU model (see [`super::algorithms::AlgoTable`], which this mirrors),
/// kept in `cudnn-plans.json`. A `None` marks a shape searched (or being searched) without a
/// usable plan: it stays on the legacy calls.
pub(in super::super) struct PlanTable {
    pub file: Option<PathBuf>,
    choices: Mutex<BTreeMap<String, Option<PlanChoice>>>,
}

impl PlanTable {
    pub fn open(file: Option<PathBuf>) -> Self {
        let choices = file
            .as_deref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|text| serde_json::from_str::<BTreeMap<String, PlanChoice>>(&text).ok())
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, Some(v)))
            .collect();
        PlanTable {
            file,
            choices: Mutex::new(choices),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Option<PlanChoice>>> {
        self.choices.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Some(Some(choice))` for a known plan, `Some(None)` for a shape that stays on the
    /// legacy calls or is being searched, `None` for a shape not seen yet; a shape not seen
    /// is marked as being searched (the caller asks the device thread to search it).
    pub fn claim(&self, key: &str) -> Option<Option<PlanChoice>> {
        let mut choices = self.lock();
        match choices.get(key) {
            Some(c) => Some(c.clone()),
            None => {
                choices.insert(key.to_string(), None);
                None
            }
        }
    }

    /// Records the outcome of a search (`None`: no plan) and saves the table.
    pub fn settle(&self, key: &str, choice: Option<PlanChoice>) {
        let mut choices = self.lock();
        choices.insert(key.to_string(), choice);
        save(self.file.as_deref(), &choices);
    }
}

/// Writes the known plans atomically; a failure is ignored (the next run searches again).
fn save(file: Option<&Path>, choices: &BTreeMap<String, Option<PlanChoice>>) {
    let Some(file) = file else { return };
    let known: BTreeMap<&String, &PlanChoice> = choices
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
        .collect();
    if let Ok(text) = serde_json::to_string_pretty(&known) {
        let _ = medddpm_atomic::write(file, text.as_bytes());
    }
}
