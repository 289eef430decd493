//! The operation graph of one convolution, the engine configurations for it and their plans.

use std::ffi::c_void;

use cudarc::cudnn::sys;

use super::super::library::check;
use super::super::operands::ConvOp;
use super::ffi::{
    finalize, get_enum, get_i64, set_desc, set_enum, set_float, set_handle, set_i64, Desc, Owned,
    A, D, T,
};
use super::{Described, Geometry, KnobRange, ALIGNMENT, CANDIDATES, W, X, Y};
use crate::error::EngineError;

/// The operation graph of one convolution (owning its descriptors).
pub(super) struct OpGraph {
    owned: Owned,
    graph: Desc,
}

impl OpGraph {
    pub(super) fn new(handle: sys::cudnnHandle_t, g: &Geometry) -> Result<Self, EngineError> {
        let mut owned = Owned::new();
        let x = tensor(&mut owned, g, X, &g.x)?;
        let w = tensor(&mut owned, g, W, &g.w)?;
        let y = tensor(&mut owned, g, Y, &g.y)?;
        let conv = convolution(&mut owned, g)?;
        let (kind, [alpha, beta, cd, xa, wa, ya]) = operation_attributes(g.op);
        let op = owned.make(kind)?;
        set_float(op, alpha, 1.0)?;
        set_float(op, beta, 0.0)?;
        set_desc(op, cd, &[conv])?;
        set_desc(op, xa, &[x])?;
        set_desc(op, wa, &[w])?;
        set_desc(op, ya, &[y])?;
        finalize(op, "convolution operation")?;
        let graph = owned.make(D::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
        set_handle(graph, A::CUDNN_ATTR_OPERATIONGRAPH_HANDLE, handle)?;
        set_desc(graph, A::CUDNN_ATTR_OPERATIONGRAPH_OPS, &[op])?;
        finalize(graph, "operation graph")?;
        Ok(OpGraph { owned, graph })
    }

    /// The engine configurations the heuristics propose, best first, with what each is built
    /// from.
    pub(super) fn proposals(&mut self) -> Result<Vec<Desc>, EngineError> {
        let heur = self.owned.make(D::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
        set_desc(
            heur,
            A::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
            &[self.graph],
        )?;
        let mode = sys::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_A as u32;
        set_enum(
            heur,
            A::CUDNN_ATTR_ENGINEHEUR_MODE,
            T::CUDNN_TYPE_HEUR_MODE,
            mode,
        )?;
        finalize(heur, "heuristics")?;
        let mut cfgs = Vec::with_capacity(CANDIDATES);
        for _ in 0..CANDIDATES {
            cfgs.push(self.owned.make(D::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)?);
        }
        let mut n = 0i64;
        // SAFETY: room for CANDIDATES descriptors, each created above.
        check(
            unsafe {
                sys::cudnnBackendGetAttribute(
                    heur,
                    A::CUDNN_ATTR_ENGINEHEUR_RESULTS,
                    T::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                    CANDIDATES as i64,
                    &mut n,
                    cfgs.as_mut_ptr() as *mut c_void,
                )
            },
            "heuristics results",
        )?;
        cfgs.truncate(n.clamp(0, CANDIDATES as i64) as usize);
        Ok(cfgs)
    }

    /// What `cfg` (a heuristics result) is made of: its engine's global index and knobs (an
    /// error without them), its numerical notes and its knobs' ranges (absent or empty where
    /// this cuDNN does not say).
    pub(super) fn describe(&mut self, cfg: Desc) -> Result<Described, EngineError> {
        let engine = self.owned.make(D::CUDNN_BACKEND_ENGINE_DESCRIPTOR)?;
        let mut n = 0i64;
        let mut out = engine;
        // SAFETY: room for one descriptor, created above.
        check(
            unsafe {
                sys::cudnnBackendGetAttribute(
                    cfg,
                    A::CUDNN_ATTR_ENGINECFG_ENGINE,
                    T::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                    1,
                    &mut n,
                    &mut out as *mut Desc as *mut c_void,
                )
            },
            "engine of a configuration",
        )?;
        let index = get_i64(engine, A::CUDNN_ATTR_ENGINE_GLOBAL_INDEX)?;
        let choices = self.descriptors(
            cfg,
            A::CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
            D::CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR,
            "knob choices",
        )?;
        let mut knobs = Vec::new();
        for c in choices {
            let ty = get_enum(
                c,
                A::CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                T::CUDNN_TYPE_KNOB_TYPE,
            )?;
            knobs.push((ty, get_i64(c, A::CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE)?));
        }
        Ok(Described {
            engine: index,
            knobs,
            notes: numerical_notes(engine).ok(),
            ranges: self.knob_ranges(engine).unwrap_or_default(),
        })
    }

    /// The values each knob of `engine` accepts.
    fn knob_ranges(&mut self, engine: Desc) -> Result<Vec<KnobRange>, EngineError> {
        let infos = self.descriptors(
            engine,
            A::CUDNN_ATTR_ENGINE_KNOB_INFO,
            D::CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR,
            "knob information",
        )?;
        let mut ranges = Vec::new();
        for i in infos {
            ranges.push(KnobRange {
                ty: get_enum(i, A::CUDNN_ATTR_KNOB_INFO_TYPE, T::CUDNN_TYPE_KNOB_TYPE)?,
                min: get_i64(i, A::CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE)?,
                max: get_i64(i, A::CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE)?,
                stride: get_i64(i, A::CUDNN_ATTR_KNOB_INFO_STRIDE)?,
            });
        }
        Ok(ranges)
    }

    /// The descriptors (of kind `kind`, created here) that attribute `name` of `d` lists.
    fn descriptors(
        &mut self,
        d: Desc,
        name: A,
        kind: D,
        what: &str,
    ) -> Result<Vec<Desc>, EngineError> {
        const MAX: usize = 32;
        let mut list = Vec::with_capacity(MAX);
        for _ in 0..MAX {
            list.push(self.owned.make(kind)?);
        }
        let mut n = 0i64;
        // SAFETY: room for MAX descriptors, each created above.
        check(
            unsafe {
                sys::cudnnBackendGetAttribute(
                    d,
                    name,
                    T::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                    MAX as i64,
                    &mut n,
                    list.as_mut_ptr() as *mut c_void,
                )
            },
            what,
        )?;
        list.truncate(n.clamp(0, MAX as i64) as usize);
        Ok(list)
    }

    /// The engine configuration `choice` names, rebuilt.
    pub(super) fn config(
        &mut self,
        engine: i64,
        knobs: &[(u32, i64)],
    ) -> Result<Desc, EngineError> {
        let e = self.owned.make(D::CUDNN_BACKEND_ENGINE_DESCRIPTOR)?;
        set_desc(e, A::CUDNN_ATTR_ENGINE_OPERATION_GRAPH, &[self.graph])?;
        set_i64(e, A::CUDNN_ATTR_ENGINE_GLOBAL_INDEX, &[engine])?;
        finalize(e, "engine")?;
        let mut choices = Vec::with_capacity(knobs.len());
        for &(ty, value) in knobs {
            let c = self.owned.make(D::CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR)?;
            set_enum(
                c,
                A::CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                T::CUDNN_TYPE_KNOB_TYPE,
                ty,
            )?;
            set_i64(c, A::CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, &[value])?;
            finalize(c, "knob choice")?;
            choices.push(c);
        }
        let cfg = self.owned.make(D::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)?;
        set_desc(cfg, A::CUDNN_ATTR_ENGINECFG_ENGINE, &[e])?;
        if !choices.is_empty() {
            set_desc(cfg, A::CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, &choices)?;
        }
        finalize(cfg, "engine configuration")?;
        Ok(cfg)
    }

    /// An execution plan of `cfg` on `handle`, with its workspace in bytes.
    pub(super) fn plan(
        &mut self,
        handle: sys::cudnnHandle_t,
        cfg: Desc,
    ) -> Result<(Desc, i64), EngineError> {
        let plan = self
            .owned
            .make(D::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
        set_handle(plan, A::CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle)?;
        set_desc(plan, A::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, &[cfg])?;
        finalize(plan, "execution plan")?;
        let ws = get_i64(plan, A::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)?;
        Ok((plan, ws))
    }
}

/// A tensor descriptor of `g`'s data type, with unique id `id`.
fn tensor(
    owned: &mut Owned,
    g: &Geometry,
    id: i64,
    (dims, strides): &([i64; 5], [i64; 5]),
) -> Result<Desc, EngineError> {
    let t = owned.make(D::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
    let dtype = g.dtype as u32;
    set_enum(
        t,
        A::CUDNN_ATTR_TENSOR_DATA_TYPE,
        T::CUDNN_TYPE_DATA_TYPE,
        dtype,
    )?;
    set_i64(t, A::CUDNN_ATTR_TENSOR_DIMENSIONS, dims)?;
    set_i64(t, A::CUDNN_ATTR_TENSOR_STRIDES, strides)?;
    set_i64(t, A::CUDNN_ATTR_TENSOR_UNIQUE_ID, &[id])?;
    set_i64(t, A::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &[ALIGNMENT as i64])?;
    finalize(t, "tensor descriptor")?;
    Ok(t)
}

/// The convolution descriptor of `g` (f32 accumulation, cross-correlation, no dilation).
fn convolution(owned: &mut Owned, g: &Geometry) -> Result<Desc, EngineError> {
    let conv = owned.make(D::CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)?;
    let float = sys::cudnnDataType_t::CUDNN_DATA_FLOAT as u32;
    let mode = sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION as u32;
    set_enum(
        conv,
        A::CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
        T::CUDNN_TYPE_DATA_TYPE,
        float,
    )?;
    set_enum(
        conv,
        A::CUDNN_ATTR_CONVOLUTION_CONV_MODE,
        T::CUDNN_TYPE_CONVOLUTION_MODE,
        mode,
    )?;
    set_i64(conv, A::CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, &[3])?;
    set_i64(conv, A::CUDNN_ATTR_CONVOLUTION_DILATIONS, &[1, 1, 1])?;
    set_i64(conv, A::CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, &g.stride)?;
    set_i64(conv, A::CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, &g.padding)?;
    set_i64(conv, A::CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, &g.padding)?;
    finalize(conv, "convolution descriptor")?;
    Ok(conv)
}

/// The operation descriptor's type for `op` and its attributes: alpha, beta, the convolution,
/// then `x`, `w`, `y` in the graph's terms.
fn operation_attributes(op: ConvOp) -> (D, [A; 6]) {
    match op {
        ConvOp::Forward => (
            D::CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
            [
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
            ],
        ),
        ConvOp::DataGrad => (
            D::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
            [
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
            ],
        ),
        ConvOp::WeightGrad => (
            D::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
            [
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
            ],
        ),
    }
}

/// The numerical notes of `engine` (`cudnnBackendNumericalNote_t` values).
fn numerical_notes(engine: Desc) -> Result<Vec<u32>, EngineError> {
    const MAX_NOTES: usize = 16;
    let mut notes = [0u32; MAX_NOTES];
    let mut n = 0i64;
    // SAFETY: room for MAX_NOTES C enum values.
    check(
        unsafe {
            sys::cudnnBackendGetAttribute(
                engine,
                A::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                T::CUDNN_TYPE_NUMERICAL_NOTE,
                MAX_NOTES as i64,
                &mut n,
                notes.as_mut_ptr() as *mut c_void,
            )
        },
        "numerical notes",
    )?;
    Ok(notes[..n.clamp(0, MAX_NOTES as i64) as usize].to_vec())
}
