//! The agreement check of a backend's products (with their autodiff gradients) against the
//! plain-op twin in f32 on the CPU (what `medddpm check-kernels` and the tests run).

use burn::backend::Autodiff;
use burn::tensor::{DType, Distribution, Tensor};

use crate::agreement::{draw_rounded, on_cpu, on_device, rel_l2, seeded_cpu};
use crate::extension::KernelBackend;
use crate::primitive::{float, tensor};
use crate::reference::product::{self as reference, spec::ProductSpec};

/// Relative L2 differences of backend `B`'s `op(a) · op(b)` and of the gradients autodiff
/// computes through it (of the sum of the product times a random weighting) against burn's
/// `matmul` in f32 on the CPU: `[product, dL/da, dL/db]`. `a` and `b` are stored as `op`
/// expects (`[batch, k, m]` for a transposed `a`); their values are drawn on the CPU and
/// rounded to `dtype` first.
pub fn engine_vs_reference<B: KernelBackend>(
    device: &B::Device,
    a_dims: [usize; 3],
    b_dims: [usize; 3],
    spec: ProductSpec,
    dtype: DType,
    seed: u64,
) -> [f64; 3] {
    use burn::backend::Flex;
    let cpu = seeded_cpu(seed);
    let (m, _, n) = spec.sizes(a_dims, b_dims).expect("shapes that multiply");
    let draw = |dims| draw_rounded(dims, Distribution::Normal(0.0, 1.0), dtype, &cpu);
    let (a, b, g) = (draw(a_dims), draw(b_dims), draw([a_dims[0], m, n]));

    type Ad<T> = Autodiff<T>;
    let want = {
        let a = Tensor::<Ad<Flex>, 3>::from_data(a.to_data(), &cpu).require_grad();
        let b = Tensor::<Ad<Flex>, 3>::from_data(b.to_data(), &cpu).require_grad();
        let c = reference::product(a.clone(), b.clone(), spec);
        let grads = (c.clone() * Tensor::from_data(g.to_data(), &cpu))
            .sum()
            .backward();
        (
            c.inner(),
            a.grad(&grads).expect("dL/da"),
            b.grad(&grads).expect("dL/db"),
        )
    };
    let on = |t| on_device::<Ad<B>, 3>(t, device, dtype);
    let back = on_cpu::<B, 3>;
    let (ga, gb) = (on(&a).require_grad(), on(&b).require_grad());
    let c: Tensor<Ad<B>, 3> = tensor(<Ad<B> as KernelBackend>::product(
        float(ga.clone()),
        float(gb.clone()),
        spec,
    ));
    let grads = (c.clone() * on(&g)).sum().backward();
    let got_a = ga.grad(&grads).expect("dL/da");
    let got_b = gb.grad(&grads).expect("dL/db");
    [
        rel_l2(back(c.inner()), want.0),
        rel_l2(back(got_a), want.1),
        rel_l2(back(got_b), want.2),
    ]
}

/// The shapes `medddpm check-kernels` and the tests check, `(a, b, trans_a, trans_b)`: the
/// U-Net's three kinds (a 1x1x1 convolution's tokens times the transposed kernel; attention's
/// `q · kᵀ` and `weights · v`), each transposition, an odd inner size, a batch of two.
pub fn cases(scale: usize) -> Vec<([usize; 3], [usize; 3], bool, bool)> {
    let n = 64 * scale;
    vec![
        ([1, n, 32], [1, 16, 32], false, true),
        ([1, n, 24], [1, n, 24], false, true),
        ([1, n, n], [1, n, 24], false, false),
        ([2, 17, 9], [2, 17, 5], true, false),
        ([2, 9, 17], [2, 5, 9], true, true),
        ([1, 3, 7], [1, 7, 1], false, false),
    ]
}
