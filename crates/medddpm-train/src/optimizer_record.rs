//! Whether a checkpoint's Adam state belongs to the weights it is resumed with.
//!
//! burn keys an optimizer record by parameter id, and a record whose ids match no parameter
//! loads without a word: every parameter then starts again from zero moments, and a run resumed
//! with another run's or another network's `optimizer.mpk` silently trains on a different path.
//! NaN moments load too, and the first step after the resume then reports a NaN loss as if the
//! data were at fault.

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::record::{AdaptorRecord, AdaptorRecordV1};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ElementConversion;
use burn::tensor::{Int, Tensor};
use medddpm_kernels::KernelBackend;

use crate::optim::{FusedAdam, Records};

/// Checks that `records` holds one state per parameter of `model` with the parameter's shape,
/// and none for parameters `model` lacks, each advanced by at most `step` optimizer steps and
/// finite: a sentence saying what does not match otherwise.
pub(crate) fn check_matches<M, B>(
    model: &M,
    records: &Records<M, B>,
    step: usize,
) -> Result<(), String>
where
    B: AutodiffBackend<InnerBackend: KernelBackend>,
    M: AutodiffModule<B>,
{
    let mut visit = Visit::<M, B> {
        records,
        step,
        params: 0,
        matched: 0,
        problems: Vec::new(),
        non_finite: Vec::new(),
    };
    model.visit(&mut visit);
    let foreign = records.len() - visit.matched;
    if foreign > 0 && visit.matched == 0 {
        return Err(format!(
            "holds Adam state for {} parameters, none of them this checkpoint's model's ({}): it is another run's or another network's",
            records.len(),
            visit.params
        ));
    }
    if foreign > 0 {
        visit.problems.push(format!(
            "{foreign} of its {} states are for parameters the model does not have",
            records.len()
        ));
    }
    // A run's first steps may skip updates (a NaN loss, f16's loss scale), never the state of
    // some parameters only: after any update every parameter has one.
    let missing = visit.params - visit.matched;
    if visit.matched > 0 && missing > 0 {
        visit.problems.push(format!(
            "{missing} of the model's {} parameters have no Adam state",
            visit.params
        ));
    }
    if visit.problems.is_empty() && !visit.non_finite.is_empty() {
        // One read-back for all: x - x is 0 for finite x and NaN otherwise.
        let bad = Tensor::cat(visit.non_finite, 0)
            .sum()
            .into_scalar()
            .elem::<i64>();
        if bad > 0 {
            return Err(format!(
                "holds {bad} NaN or infinite Adam moment values: the optimizer state is damaged (the weights may be intact: the checkpoint before it, or a fresh run from these weights, can continue)"
            ));
        }
    }
    match visit.problems.as_slice() {
        [] => Ok(()),
        problems => Err(format!(
            "does not belong to this checkpoint's model: {}",
            problems.join("; ")
        )),
    }
}

struct Visit<'a, M, B>
where
    B: AutodiffBackend<InnerBackend: KernelBackend>,
    M: AutodiffModule<B>,
{
    records: &'a Records<M, B>,
    step: usize,
    params: usize,
    matched: usize,
    problems: Vec<String>,
    /// Per moment, its count of non-finite values (read back once, at the end).
    non_finite: Vec<Tensor<B::InnerBackend, 1, Int>>,
}

impl<M, B> ModuleVisitor<B> for Visit<'_, M, B>
where
    B: AutodiffBackend<InnerBackend: KernelBackend>,
    M: AutodiffModule<B>,
{
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.params += 1;
        let Some(record) = self.records.get(&param.id) else {
            return;
        };
        self.matched += 1;
        if self.problems.len() >= 3 {
            return;
        }
        let shape = param.val().dims().to_vec();
        if rank(record) != D {
            self.problems.push(format!(
                "the state of a parameter of shape {shape:?} has {} dimensions",
                rank(record)
            ));
            return;
        }
        let state = record.clone().into_state::<D>();
        let moment = state.momentum.moment_1.dims().to_vec();
        if moment != shape || state.momentum.moment_2.dims().to_vec() != shape {
            self.problems.push(format!(
                "the state of a parameter of shape {shape:?} has shape {moment:?}"
            ));
        } else if state.momentum.time > self.step {
            self.problems.push(format!(
                "its moments have seen {} updates, more than the checkpoint's {} steps",
                state.momentum.time, self.step
            ));
        } else {
            for m in [state.momentum.moment_1, state.momentum.moment_2] {
                let count = m.clone().sub(m).is_nan().int().sum();
                self.non_finite.push(count.reshape([1]));
            }
        }
    }
}

/// Dimensions of the tensors a record holds.
fn rank<B>(record: &AdaptorRecord<FusedAdam, B>) -> usize
where
    B: AutodiffBackend<InnerBackend: KernelBackend>,
{
    let AdaptorRecord::V1(v1) = record;
    match v1 {
        AdaptorRecordV1::Rank0(_) => 0,
        AdaptorRecordV1::Rank1(_) => 1,
        AdaptorRecordV1::Rank2(_) => 2,
        AdaptorRecordV1::Rank3(_) => 3,
        AdaptorRecordV1::Rank4(_) => 4,
        AdaptorRecordV1::Rank5(_) => 5,
        AdaptorRecordV1::Rank6(_) => 6,
        AdaptorRecordV1::Rank7(_) => 7,
        AdaptorRecordV1::Rank8(_) => 8,
    }
}
