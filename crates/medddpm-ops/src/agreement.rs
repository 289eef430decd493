//! How far a backend's output is from its reference twin's, as the agreement checks measure it.

use burn::tensor::{backend::Backend, Tensor};

/// The larger of two errors, NaN counting as infinite (`f64::max` would drop it).
pub fn worse(a: f64, b: f64) -> f64 {
    let b = if b.is_nan() { f64::INFINITY } else { b };
    a.max(b)
}

/// `||a - b|| / ||b||`, in f64 on the host.
pub fn rel_l2<B: Backend, const D: usize>(a: Tensor<B, D>, b: Tensor<B, D>) -> f64 {
    assert_eq!(a.dims(), b.dims(), "shapes differ");
    let f = |t: Tensor<B, D>| -> Vec<f32> {
        t.cast(burn::tensor::DType::F32)
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .expect("f32 data")
    };
    let (a, b) = (f(a), f(b));
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(&b) {
        num += ((x - y) as f64).powi(2);
        den += (*y as f64).powi(2);
    }
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}
