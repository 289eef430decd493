//! The graph API's descriptors: creation (owned, destroyed together) and attributes.

use std::ffi::c_void;

use cudarc::cudnn::sys;

use super::super::library::check;
use crate::error::EngineError;

pub(super) type Desc = sys::cudnnBackendDescriptor_t;
pub(super) use sys::cudnnBackendAttributeName_t as A;
pub(super) use sys::cudnnBackendAttributeType_t as T;
pub(super) use sys::cudnnBackendDescriptorType_t as D;

/// Descriptors destroyed together on drop (a plan keeps what it was built from alive).
pub(super) struct Owned(pub(super) Vec<Desc>);

impl Owned {
    pub(super) fn new() -> Self {
        Owned(Vec::new())
    }

    /// A new descriptor of `kind`, owned here.
    pub(super) fn make(&mut self, kind: D) -> Result<Desc, EngineError> {
        let mut d: Desc = std::ptr::null_mut();
        // SAFETY: creates a descriptor into a local.
        check(
            unsafe { sys::cudnnBackendCreateDescriptor(kind, &mut d) },
            "create descriptor",
        )?;
        self.0.push(d);
        Ok(d)
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        for d in self.0.drain(..).rev() {
            // SAFETY: created by `make`, destroyed once.
            unsafe { sys::cudnnBackendDestroyDescriptor(d) };
        }
    }
}

/// Sets attribute `name` of `d` to the `n` values at `values`.
///
/// # Safety
/// `values` points to `n` values of the C type `ty` names.
pub(super) unsafe fn set<V>(
    d: Desc,
    name: A,
    ty: T,
    n: usize,
    values: *const V,
) -> Result<(), EngineError> {
    check(
        unsafe { sys::cudnnBackendSetAttribute(d, name, ty, n as i64, values as *const c_void) },
        format!("set {name:?}"),
    )
}

/// Sets attribute `name` of `d` to one value of a C enum of type `ty` (4 bytes, as cuDNN's
/// enums are laid out).
pub(super) fn set_enum(d: Desc, name: A, ty: T, value: u32) -> Result<(), EngineError> {
    // SAFETY: one u32.
    unsafe { set(d, name, ty, 1, &value) }
}

pub(super) fn set_i64(d: Desc, name: A, values: &[i64]) -> Result<(), EngineError> {
    // SAFETY: `values` is a live slice of i64.
    unsafe { set(d, name, T::CUDNN_TYPE_INT64, values.len(), values.as_ptr()) }
}

pub(super) fn set_desc(d: Desc, name: A, values: &[Desc]) -> Result<(), EngineError> {
    // SAFETY: `values` is a live slice of descriptors.
    unsafe {
        set(
            d,
            name,
            T::CUDNN_TYPE_BACKEND_DESCRIPTOR,
            values.len(),
            values.as_ptr(),
        )
    }
}

pub(super) fn set_float(d: Desc, name: A, value: f32) -> Result<(), EngineError> {
    // SAFETY: one f32.
    unsafe { set(d, name, T::CUDNN_TYPE_FLOAT, 1, &value) }
}

pub(super) fn set_handle(d: Desc, name: A, handle: sys::cudnnHandle_t) -> Result<(), EngineError> {
    // SAFETY: one handle.
    unsafe { set(d, name, T::CUDNN_TYPE_HANDLE, 1, &handle) }
}

pub(super) fn finalize(d: Desc, what: &str) -> Result<(), EngineError> {
    // SAFETY: a descriptor with its attributes set.
    check(unsafe { sys::cudnnBackendFinalize(d) }, what)
}

pub(super) fn get_i64(d: Desc, name: A) -> Result<i64, EngineError> {
    let (mut v, mut n) = (0i64, 0i64);
    // SAFETY: room for one i64.
    check(
        unsafe {
            sys::cudnnBackendGetAttribute(
                d,
                name,
                T::CUDNN_TYPE_INT64,
                1,
                &mut n,
                &mut v as *mut i64 as *mut c_void,
            )
        },
        format!("get {name:?}"),
    )?;
    Ok(v)
}

/// One C enum value (4 bytes) of type `ty`, attribute `name` of `d`.
pub(super) fn get_enum(d: Desc, name: A, ty: T) -> Result<u32, EngineError> {
    let (mut v, mut n) = (0u32, 0i64);
    // SAFETY: room for one C enum value.
    check(
        unsafe {
            sys::cudnnBackendGetAttribute(d, name, ty, 1, &mut n, &mut v as *mut u32 as *mut c_void)
        },
        format!("get {name:?}"),
    )?;
    Ok(v)
}
