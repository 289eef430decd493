use burn::backend::{Autodiff, Flex};
use burn::tensor::backend::DeviceId;
use burn::tensor::{Tensor, TensorData};

use super::check::{expected_mean, rank_values, relative_error, transposed_buffer};
use super::*;
use crate::primitive::float;

fn flex_tensor() -> Tensor<Flex, 1> {
    Tensor::from_data(TensorData::new(vec![1.0f32, 2.0], [2]), &Default::default())
}

fn id(index: u16) -> DeviceId {
    DeviceId::new(0, index)
}

#[test]
fn flex_and_its_autodiff_have_no_collective_and_say_so() {
    let group = [id(0)];
    let err = Flex::collective_available(&group).unwrap_err().to_string();
    assert!(err.contains("no collective operations") && err.contains("NCCL runs on CUDA only"));
    let err = Flex::all_reduce_mean(float(flex_tensor()), &group).unwrap_err();
    assert!(err.to_string().contains("NCCL runs on CUDA only"));
    let err = Flex::all_reduce_mean_many(vec![float(flex_tensor())], &group).unwrap_err();
    assert!(err.to_string().contains("NCCL runs on CUDA only"));

    type Ad = Autodiff<Flex>;
    let x: Tensor<Ad, 1> =
        Tensor::from_data(TensorData::new(vec![1.0f32], [1]), &Default::default());
    let err = Ad::all_reduce_mean(float(x), &group).unwrap_err();
    assert!(err.to_string().contains("NCCL runs on CUDA only"));
    assert!(Ad::collective_available(&group).is_err());
}

#[test]
fn the_check_refuses_before_starting_ranks_on_flex() {
    let err = check_all_reduce::<Flex>(&[Default::default()]).unwrap_err();
    assert!(err.to_string().contains("NCCL runs on CUDA only"));
}

#[test]
fn without_cuda_nccl_reports_why() {
    if cfg!(feature = "cuda") {
        // With CUDA compiled in the answer depends on the machine; it must not panic.
        let _ = nccl_status();
        let _ = cuda_device_count();
    } else {
        assert!(nccl_status()
            .unwrap_err()
            .to_string()
            .contains("`cuda` feature"));
        assert!(cuda_device_count().is_err());
    }
}

#[test]
fn groups_are_sorted_and_checked() {
    assert_eq!(
        sorted_group(&[id(2), id(0), id(1)]).unwrap(),
        vec![id(0), id(1), id(2)]
    );
    assert_eq!(sorted_group(&[id(3)]).unwrap(), vec![id(3)]);
    assert!(sorted_group(&[]).unwrap_err().to_string().contains("empty"));
    let twice = sorted_group(&[id(1), id(0), id(1)])
        .unwrap_err()
        .to_string();
    assert!(
        twice.contains("twice") && twice.contains("index=1"),
        "{twice}"
    );
    let mixed = sorted_group(&[id(0), DeviceId::new(1, 0)])
        .unwrap_err()
        .to_string();
    assert!(mixed.contains("mixes device types"), "{mixed}");
}

#[test]
fn packed_parts_start_on_the_alignment_and_never_overlap() {
    // 64 f32 elements: the 256-byte alignment of CUDA devices.
    let sizes = [1usize, 64, 65, 0, 1728, 3];
    let offsets = pack_offsets(sizes.iter().copied(), 64);
    assert_eq!(offsets, vec![0, 64, 128, 256, 256, 1984, 2048]);
    for (i, n) in sizes.iter().enumerate() {
        assert_eq!(offsets[i] % 64, 0);
        assert!(offsets[i] + n <= offsets[i + 1]);
    }
    assert_eq!(pack_offsets(std::iter::empty(), 64), vec![0]);
    assert_eq!(pack_offsets([3, 5].into_iter(), 1), vec![0, 3, 8]);
}

#[test]
fn the_packed_default_averages_in_f32_or_says_why_not() {
    // Backends without a collective refuse the packed call as they refuse the others.
    let err = <Flex as CollectiveBackend>::all_reduce_mean_packed(
        vec![float(flex_tensor())],
        &[id(0), id(1)],
    )
    .unwrap_err();
    assert!(err.to_string().contains("NCCL"), "{err}");
}

#[test]
fn the_expected_mean_is_the_mean_of_the_ranks_values() {
    for ranks in 1..=4 {
        for call in 0..3 {
            let mean: Vec<f32> = (0..30)
                .map(|i| {
                    let sum: f32 = (0..ranks).map(|r| rank_values(30, r, call)[i]).sum();
                    sum / ranks as f32
                })
                .collect();
            assert_eq!(mean, expected_mean(30, ranks, call));
        }
    }
    // Rank 0 of call 1: base + 1 = (i % 13) - 5.
    assert_eq!(rank_values(3, 0, 1), vec![-5.0, -4.0, -3.0]);
}

#[test]
fn the_transposed_buffer_reads_back_in_order() {
    let values: Vec<f32> = (0..6).map(|v| v as f32).collect();
    // [2, 3] values; the buffer is [3, 2].
    let buf = transposed_buffer(&values, 2, 3);
    assert_eq!(buf, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    let t: Tensor<Flex, 2> = Tensor::from_data(TensorData::new(buf, [3, 2]), &Default::default());
    let read = t.swap_dims(0, 1).into_data().to_vec::<f32>().unwrap();
    assert_eq!(read, values);
}

#[test]
fn errors_are_relative_to_the_largest_expected_value() {
    assert_eq!(relative_error(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
    assert_eq!(relative_error(&[1.0, 9.0], &[1.0, 10.0]), 0.1);
    // Below 1 in magnitude the error is absolute.
    assert_eq!(relative_error(&[0.25], &[0.5]), 0.25);
    assert!(relative_error(&[f32::NAN], &[0.0]).is_infinite());
    assert!(relative_error(&[1.0], &[1.0, 2.0]).is_infinite());
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::super::nccl::{missing_library_message, version_string};
    use super::super::MIN_NCCL_VERSION;

    #[test]
    fn nccl_versions_read_as_released() {
        assert_eq!(version_string(22105), "2.21.5");
        assert_eq!(version_string(21003), "2.10.3");
        assert_eq!(version_string(MIN_NCCL_VERSION), "2.10.0");
        // Before 2.9 NCCL numbered 1000 * major + 100 * minor + patch.
        assert_eq!(version_string(2804), "2.8.4");
    }

    #[test]
    fn a_missing_nccl_says_which_names_and_how_to_link_it() {
        let names = cudarc::get_lib_name_candidates("nccl");
        let msg = missing_library_message(&names);
        assert!(
            msg.contains("libnccl.so,") && msg.contains("libnccl.so.2"),
            "{msg}"
        );
        assert!(msg.contains("LD_LIBRARY_PATH") && msg.contains("nvidia-nccl-cu12"));
        // cudarc does not try NCCL's soname: the reason for the link.
        assert!(!names.iter().any(|n| n == "libnccl.so.2"), "{names:?}");
    }

    #[test]
    fn nccl_status_never_panics_and_names_the_library() {
        let status = super::nccl_status();
        eprintln!("{status:?}");
        match status {
            Ok(v) => assert!(v.starts_with("NCCL 2."), "{v}"),
            Err(e) => assert!(e.to_string().contains("NCCL"), "{e}"),
        }
    }
}
