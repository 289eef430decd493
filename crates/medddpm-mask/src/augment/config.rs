//! What the augmentations may do ([`AugmentConfig`]) and which labels are the tumour and the
//! tissue it must stay in ([`TumourLabels`]).

use serde::{Deserialize, Serialize};

use super::error::AugmentError;
use crate::LabelScheme;

/// Chances and ranges of the mask augmentations. Every value is drawn uniformly in its range;
/// a chance of 0 switches a transform off. Defaults are small changes, so a variant is still a
/// plausible mask of the same kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AugmentConfig {
    /// Chance of a left-right flip. By default, 0.5.
    pub flip_probability: f64,
    /// Chance of a rotation about the grid's centre. By default, 1.
    pub rotation_probability: f64,
    /// Largest rotation about each world axis (x, y, z), in degrees. By default, 10.
    pub max_rotation_deg: f64,
    /// Chance of an isotropic scaling about the grid's centre. By default, 1.
    pub scale_probability: f64,
    /// Range of that scale factor. By default, `[0.9, 1.1]`.
    pub scale_range: [f64; 2],
    /// Chance of moving and scaling the tumour inside the brain (only with tumour labels, and
    /// only in masks that have a tumour). By default, 1.
    pub tumour_probability: f64,
    /// Largest tumour shift along each voxel axis, in whole voxels. By default, 10.
    pub max_tumour_shift: u32,
    /// Range of the tumour's scale factor about its centroid. By default, `[0.8, 1.2]`.
    pub tumour_scale_range: [f64; 2],
    /// Draws tried, per stage (rotation/scaling, then the tumour), before giving up on a mask
    /// whose variants keep leaving the grid or the brain. A failed draw stops at its first
    /// misplaced voxel, so tries are cheap; a large BraTS tumour fits in about one draw of
    /// six. By default, 100.
    pub max_tries: u32,
}

impl Default for AugmentConfig {
    fn default() -> Self {
        Self {
            flip_probability: 0.5,
            rotation_probability: 1.0,
            max_rotation_deg: 10.0,
            scale_probability: 1.0,
            scale_range: [0.9, 1.1],
            tumour_probability: 1.0,
            max_tumour_shift: 10,
            tumour_scale_range: [0.8, 1.2],
            max_tries: 100,
        }
    }
}

impl AugmentConfig {
    /// No transform at all: every chance 0 (a variant equals its mask).
    pub fn none() -> Self {
        Self {
            flip_probability: 0.0,
            rotation_probability: 0.0,
            scale_probability: 0.0,
            tumour_probability: 0.0,
            ..Self::default()
        }
    }

    /// Refuses chances outside [0, 1], rotations of a half turn or more, scale ranges that
    /// are not `0 < min <= max`, and `max_tries` of 0, naming the field.
    pub fn validate(&self) -> Result<(), AugmentError> {
        let bad =
            |field: &'static str, reason: String| AugmentError::InvalidConfig { field, reason };
        for (field, p) in [
            ("flip_probability", self.flip_probability),
            ("rotation_probability", self.rotation_probability),
            ("scale_probability", self.scale_probability),
            ("tumour_probability", self.tumour_probability),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(bad(field, format!("{p} is not a probability in [0, 1]")));
            }
        }
        let r = self.max_rotation_deg;
        if !(0.0..180.0).contains(&r) {
            return Err(bad(
                "max_rotation_deg",
                format!("{r} is not in [0, 180) degrees"),
            ));
        }
        for (field, [lo, hi]) in [
            ("scale_range", self.scale_range),
            ("tumour_scale_range", self.tumour_scale_range),
        ] {
            if !(lo > 0.0 && lo <= hi && hi.is_finite()) {
                return Err(bad(
                    field,
                    format!("[{lo}, {hi}] is not a range 0 < min <= max"),
                ));
            }
        }
        if self.max_tries == 0 {
            return Err(bad("max_tries", "must be at least 1".into()));
        }
        Ok(())
    }
}

/// Which labels form the tumour, moved and scaled as one body, and which are the brain it
/// must stay inside. Whole-head masks have no brain label: the head (label 1) stands in, so
/// their tumour stays inside the head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TumourLabels {
    /// Labels of the tumour (whole-head: 2; BraTS: 1, 2, 3).
    pub tumour: Vec<i64>,
    /// Labels of the tissue around it (whole-head: 1; BraTS: 4). The first one fills the
    /// place a moved tumour left.
    pub brain: Vec<i64>,
}

impl TumourLabels {
    /// The whole-head masks' labels: tumour 2 inside head 1.
    pub fn whole_head() -> Self {
        Self {
            tumour: vec![2],
            brain: vec![1],
        }
    }

    /// The BraTS masks' labels: necrotic core 1, oedema 2 and enhancing tumour 3 inside
    /// brain 4.
    pub fn brats() -> Self {
        Self {
            tumour: vec![1, 2, 3],
            brain: vec![4],
        }
    }

    /// The labels a scheme implies, from its channel names: with a channel named "brain"
    /// (as `medddpm-train` finds the brain label), that channel is the brain and every other
    /// channel the tumour; else with one named "tumour", that one is the tumour and the
    /// others the brain. `None` for schemes with neither, or where one side is empty.
    pub fn from_scheme(scheme: &LabelScheme) -> Option<Self> {
        let named = |name: &str| scheme.channels.iter().any(|c| c.name == name);
        let side = |inside: bool, name: &str| -> Vec<i64> {
            let mut v: Vec<i64> = scheme
                .channels
                .iter()
                .filter(|c| (c.name == name) == inside)
                .flat_map(|c| c.labels.iter().copied())
                .collect();
            v.dedup();
            v
        };
        let (tumour, brain) = if named("brain") {
            (side(false, "brain"), side(true, "brain"))
        } else if named("tumour") {
            (side(true, "tumour"), side(false, "tumour"))
        } else {
            return None;
        };
        let labels = Self { tumour, brain };
        labels.validate().ok().map(|_| labels)
    }

    /// Refuses empty sides, background (0) on either side and a label on both.
    pub fn validate(&self) -> Result<(), AugmentError> {
        let bad = |reason: String| Err(AugmentError::InvalidLabels { reason });
        if self.tumour.is_empty() || self.brain.is_empty() {
            return bad(format!(
                "tumour {:?} and brain {:?} must both name a label",
                self.tumour, self.brain
            ));
        }
        if self.tumour.contains(&0) || self.brain.contains(&0) {
            return bad("label 0 is background, neither tumour nor brain".into());
        }
        if let Some(l) = self.tumour.iter().find(|l| self.brain.contains(l)) {
            return bad(format!("label {l} is both tumour and brain"));
        }
        Ok(())
    }

    /// Whether `label` is a tumour label.
    pub fn is_tumour(&self, label: i64) -> bool {
        self.tumour.contains(&label)
    }

    /// Whether `label` is inside the brain: a brain label or a tumour label.
    pub fn is_brain(&self, label: i64) -> bool {
        self.brain.contains(&label) || self.is_tumour(label)
    }

    /// The label written where the tumour left.
    pub fn fill(&self) -> i64 {
        self.brain[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_follow_from_the_schemes() {
        let head = TumourLabels::from_scheme(&LabelScheme::whole_head()).unwrap();
        assert_eq!(head, TumourLabels::whole_head());
        let brats = TumourLabels::from_scheme(&LabelScheme::brats()).unwrap();
        assert_eq!(brats, TumourLabels::brats());
        assert_eq!((brats.fill(), head.fill()), (4, 1));
        assert!(brats.is_brain(3) && brats.is_brain(4) && !brats.is_brain(0));
        let mut other = LabelScheme::whole_head();
        other.channels[1].name = "lesion".into();
        assert_eq!(TumourLabels::from_scheme(&other), None);
    }

    #[test]
    fn bad_settings_name_the_field() {
        let field = |cfg: AugmentConfig| match cfg.validate() {
            Err(AugmentError::InvalidConfig { field, .. }) => field,
            other => panic!("expected a refusal, got {other:?}"),
        };
        let d = AugmentConfig::default();
        d.validate().unwrap();
        AugmentConfig::none().validate().unwrap();
        let c = AugmentConfig {
            flip_probability: 1.5,
            ..d.clone()
        };
        assert_eq!(field(c), "flip_probability");
        let c = AugmentConfig {
            tumour_scale_range: [1.2, 0.8],
            ..d.clone()
        };
        assert_eq!(field(c), "tumour_scale_range");
        let c = AugmentConfig {
            max_rotation_deg: f64::NAN,
            ..d.clone()
        };
        assert_eq!(field(c), "max_rotation_deg");
        assert_eq!(field(AugmentConfig { max_tries: 0, ..d }), "max_tries");
    }

    #[test]
    fn config_reads_from_toml_with_defaults_and_refuses_typos() {
        let c: AugmentConfig = toml::from_str("max_rotation_deg = 5.0").unwrap();
        assert_eq!(c.max_rotation_deg, 5.0);
        assert_eq!(c.scale_range, [0.9, 1.1]);
        let err = toml::from_str::<AugmentConfig>("max_rotation = 5.0").unwrap_err();
        assert!(err.to_string().contains("max_rotation"), "{err}");
    }

    #[test]
    fn overlapping_or_background_labels_are_refused() {
        let bad = TumourLabels {
            tumour: vec![1, 4],
            brain: vec![4],
        };
        assert!(bad.validate().unwrap_err().to_string().contains("label 4"));
        let bad = TumourLabels {
            tumour: vec![0],
            brain: vec![1],
        };
        assert!(bad.validate().is_err());
    }
}
