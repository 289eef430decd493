//! Launches over lists of tensors (the Adam update, the gradient sum): a launch takes
//! consecutive items of one dtype combination, as many as the device's bindings allow up to a
//! cap, and a fixed grid whose threads stride through each tensor in turn.

use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;
use cubecl::CubeDim;

/// Threads per cube, and the most cubes a launch uses (its threads then stride).
pub(super) const CUBE_SIZE: u32 = 256;
const MAX_CUBES: usize = 1024;

/// `items` in launches of consecutive items with equal `key`s, at most `per_launch` each, their
/// outputs in the items' order.
pub(super) fn in_launches<T, K: PartialEq, O>(
    items: Vec<T>,
    per_launch: usize,
    key: impl Fn(&T) -> K,
    mut launch: impl FnMut(Vec<T>) -> Vec<O>,
) -> Vec<O> {
    let mut results = Vec::with_capacity(items.len());
    let mut group: Vec<T> = Vec::with_capacity(per_launch);
    for item in items {
        let joins = group.len() < per_launch && group.first().is_none_or(|g| key(g) == key(&item));
        if !joins {
            results.extend(launch(std::mem::take(&mut group)));
        }
        group.push(item);
    }
    if !group.is_empty() {
        results.extend(launch(group));
    }
    results
}

/// How many items of `bindings` tensors each one launch takes on `client`'s device, at most
/// `cap` (room left for the backend's own bindings where the device allows few).
pub(super) fn per_launch<R: CubeRuntime>(
    client: &ComputeClient<R>,
    bindings: usize,
    cap: usize,
) -> usize {
    let max_bindings = client.properties().hardware.max_bindings as usize;
    (max_bindings.saturating_sub(2) / bindings).clamp(1, cap)
}

/// The grid for tensors of at most `longest` elements, and the stride of its threads.
pub(super) fn grid(longest: usize) -> (CubeCount, CubeDim, u32) {
    let cubes = longest.div_ceil(CUBE_SIZE as usize).clamp(1, MAX_CUBES) as u32;
    (
        CubeCount::Static(cubes, 1, 1),
        CubeDim::new_1d(CUBE_SIZE),
        cubes * CUBE_SIZE,
    )
}
