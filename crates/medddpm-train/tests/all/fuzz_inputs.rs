//! Property tests of the four readers of untrusted input: the NIfTI reader, the mask encoder,
//! the experiment parser and the checkpoint loader. Each gets mutated versions of valid inputs
//! (bit flips, overwritten header fields, extreme values, truncation, appended bytes) and must
//! answer Ok or a typed error: never a panic, and never a live allocation above 64 MiB (every
//! input here is under 1 MiB; a header claiming more is refused before its voxels are read).
//!
//! `MEDDDPM_FUZZ_INPUTS` sets the inputs per reader (default 2,000, a few seconds; the
//! recorded run used 250,000 each: docs/reliability.md). A failing input is written to the
//! system temp folder and its path printed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::backend::Flex;
use burn::module::Module;
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
use medddpm_mask::LabelScheme;
use medddpm_nifti::{DataType, Endian, Volume, WriteOptions};
use medddpm_train::ExperimentConfig;
use medddpm_unet::{UNet, UNetConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Live bytes and the peak since the last reset.
struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const ALLOCATION_BOUND: usize = 64 << 20;

/// The largest allocation of any one input of the reader under test.
static READER_PEAK: AtomicUsize = AtomicUsize::new(0);

/// A reader's counts, printed as one `fuzz-record` line that `scripts/fuzz-record.py` reads
/// into docs/reliability.md.
struct Tally {
    reader: &'static str,
    start: std::time::Instant,
    ok: usize,
    refused: usize,
}

impl Tally {
    fn new(reader: &'static str) -> Self {
        READER_PEAK.store(0, Ordering::Relaxed);
        Self {
            reader,
            start: std::time::Instant::now(),
            ok: 0,
            refused: 0,
        }
    }

    /// Counts `result` of the input named `name`: its value when read, `None` (after checking
    /// that the error names the input) when refused.
    fn count<T, E: std::fmt::Display>(&mut self, result: Result<T, E>, name: &str) -> Option<T> {
        match result {
            Ok(value) => {
                self.ok += 1;
                Some(value)
            }
            Err(e) => {
                assert!(e.to_string().contains(name), "unnamed: {e}");
                self.refused += 1;
                None
            }
        }
    }

    fn print(&self, extra: &str) {
        println!(
            "fuzz-record reader={} inputs={} ok={} refused={} seconds={:.1} peak_bytes={}{extra}",
            self.reader,
            self.ok + self.refused,
            self.ok,
            self.refused,
            self.start.elapsed().as_secs_f64(),
            READER_PEAK.load(Ordering::Relaxed)
        );
    }
}

fn inputs_per_reader() -> usize {
    std::env::var("MEDDDPM_FUZZ_INPUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
}

/// Runs `check` on `input` without letting a panic escape, and measures its peak allocation
/// above what was live before. Panics (failing the test) with the input saved on a finding.
/// The allocation counters and the panic hook are process-wide: one reader at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn run_one(reader: &str, n: usize, input: &[u8], check: impl FnOnce(&[u8])) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(input)));
    std::panic::set_hook(hook);
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    READER_PEAK.fetch_max(peak, Ordering::Relaxed);
    let finding = match out {
        Err(panic) => Some(format!(
            "panicked: {}",
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
        Ok(()) if peak > ALLOCATION_BOUND => Some(format!("allocated {peak} bytes")),
        Ok(()) => None,
    };
    if let Some(what) = finding {
        let path = std::env::temp_dir().join(format!("medddpm-fuzz-{reader}-{n}.bin"));
        std::fs::write(&path, input).unwrap();
        panic!(
            "{reader} input {n} {what}; input saved to {}",
            path.display()
        );
    }
}

/// One mutation of `seed`: a few of bit flips, overwritten aligned words (header fields),
/// extreme values, truncation, appended bytes.
fn mutate(rng: &mut ChaCha8Rng, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        if b.is_empty() {
            b.push(rng.random());
            continue;
        }
        match rng.random_range(0..6) {
            0 => {
                let i = rng.random_range(0..b.len());
                b[i] ^= 1 << rng.random_range(0..8);
            }
            1 => {
                let i = rng.random_range(0..b.len());
                b[i] = rng.random();
            }
            2 => {
                // A 2- or 4-byte field (most of the NIfTI header) set to an extreme.
                let i = rng.random_range(0..b.len()) & !1;
                let extremes: [u32; 8] = [
                    0,
                    u32::MAX,
                    0x7fff_ffff,
                    0x8000_0000,
                    0x7fc0_0000, // NaN
                    0x7f80_0000, // inf
                    0xff80_0000, // -inf
                    0x0000_7fff,
                ];
                let v = extremes[rng.random_range(0..extremes.len())].to_le_bytes();
                let w = if rng.random() { 2 } else { 4 };
                for k in 0..w {
                    if i + k < b.len() {
                        b[i + k] = v[k];
                    }
                }
            }
            3 => b.truncate(rng.random_range(0..b.len())),
            4 => {
                let extra: Vec<u8> = (0..rng.random_range(1..64)).map(|_| rng.random()).collect();
                b.extend(extra);
            }
            _ => {
                let i = rng.random_range(0..b.len());
                let j = rng.random_range(i..b.len().min(i + 16) + 1).min(b.len());
                b.drain(i..j);
            }
        }
    }
    b
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

/// Valid small NIfTI files: several data types, both byte orders, gzip and not.
fn nifti_seeds() -> Vec<Vec<u8>> {
    let tmp = tempfile::tempdir().unwrap();
    let mut seeds = Vec::new();
    let dims = [5usize, 4, 3];
    let data: Vec<f32> = (0..60).map(|x| (x % 7) as f32).collect();
    let affine = [
        [1.5, 0.0, 0.0, -3.0],
        [0.0, 1.5, 0.0, -2.0],
        [0.0, 0.0, 2.0, -1.0],
        [0.0, 0.0, 0.0, 1.0],
    ];
    let vol = Volume::new(dims, data, affine).unwrap();
    for (i, (dtype, endian)) in [
        (DataType::F32, Endian::Little),
        (DataType::U8, Endian::Little),
        (DataType::I16, Endian::Big),
        (DataType::F64, Endian::Little),
    ]
    .into_iter()
    .enumerate()
    {
        let path = tmp.path().join(format!("s{i}.nii"));
        vol.write_with(&path, WriteOptions { dtype, endian })
            .unwrap();
        let raw = std::fs::read(&path).unwrap();
        seeds.push(gzip(&raw));
        seeds.push(raw);
    }
    seeds
}

#[test]
fn fuzz_the_nifti_reader() {
    let _serial = crate::common::one_at_a_time();
    let _serial = serial();
    let mut tally = Tally::new("nifti");
    let seeds = nifti_seeds();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let name = Path::new("fuzz.nii.gz");
    for n in 0..inputs_per_reader() {
        let seed = &seeds[n % seeds.len()];
        // Half the gzip inputs are mutated before compression (a valid stream of a bad file).
        let input = if n % 4 == 0 && seed[0] == 0x1f {
            let plain = &seeds[n % seeds.len() + 1];
            gzip(&mutate(&mut rng, plain))
        } else {
            mutate(&mut rng, seed)
        };
        run_one("nifti", n, &input, |bytes| {
            let read = Volume::from_bytes(bytes.to_vec(), name);
            if let Some(v) = tally.count(read, "fuzz.nii.gz") {
                assert_eq!(v.data().len(), v.voxel_count());
            }
        });
    }
    tally.print("");
    let (ok, err) = (tally.ok, tally.refused);
    assert!(
        err > 0 && ok > 0,
        "mutations should give both ({ok} ok, {err} errors)"
    );
}

/// The header's claim against its gzip stream: a valid header whose dimensions claim anything
/// from a few voxels to 32767^3, over a gzip stream of zeros or of random bytes of random
/// length. A claim more than the stream can inflate to must be refused before inflating (a
/// claim error, nothing allocated for the voxels); anything else is read or refused with the
/// stream's own error, never above the allocation bound.
#[test]
fn fuzz_the_header_claim_bound() {
    let _serial = crate::common::one_at_a_time();
    let _serial = serial();
    let mut tally = Tally::new("nifti-claim");
    // The plain little-endian f32 seed: header (352 bytes with its extension flag), then data.
    let header: Vec<u8> = nifti_seeds()[1][..352].to_vec();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let name = Path::new("claim.nii.gz");
    let mut claims = 0usize;
    for n in 0..inputs_per_reader() {
        let mut file = header.clone();
        for axis in 0..3 {
            // Log-uniform over 1..32767 voxels per axis.
            let side = (2f64.powf(rng.random_range(0.0..15.0)) as i16).max(1);
            file[42 + 2 * axis..44 + 2 * axis].copy_from_slice(&side.to_le_bytes());
        }
        let bits = rng.random_range(0..23);
        let len = rng.random_range(0..(1usize << bits));
        if rng.random() {
            file.resize(file.len() + len, 0);
        } else {
            file.extend((0..len.min(1 << 16)).map(|_| rng.random::<u8>()));
        }
        let input = gzip(&file);
        run_one("nifti-claim", n, &input, |bytes| {
            let read = Volume::from_bytes(bytes.to_vec(), name);
            if let Err(e) = &read {
                claims += usize::from(e.to_string().contains("more than its"));
            }
            if let Some(v) = tally.count(read, "claim.nii.gz") {
                assert_eq!(v.data().len(), v.voxel_count());
            }
        });
    }
    tally.print(&format!(" refused_by_claim={claims}"));
    let ok = tally.ok;
    assert!(ok > 0 && claims > 0, "{ok} read, {claims} claims refused");
}

#[test]
fn fuzz_the_mask_encoder() {
    let _serial = crate::common::one_at_a_time();
    let _serial = serial();
    let mut tally = Tally::new("mask");
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let schemes = [LabelScheme::whole_head(), LabelScheme::brats()];
    let special = [
        f32::NAN,
        f32::INFINITY,
        -1.0,
        0.5,
        3.0,
        255.0,
        1e30,
        -0.0,
        f32::MIN_POSITIVE,
        4.0,
    ];
    let affine = [
        [1.0, 0.0, 0.0, 0.0],
        [0.0, 1.0, 0.0, 0.0],
        [0.0, 0.0, 1.0, 0.0],
        [0.0, 0.0, 0.0, 1.0],
    ];
    for n in 0..inputs_per_reader() {
        let dims = [
            rng.random_range(1..9),
            rng.random_range(1..9),
            rng.random_range(1..9),
        ];
        let len = dims.iter().product::<usize>();
        let data: Vec<f32> = (0..len)
            .map(|_| match rng.random_range(0..10) {
                0 => special[rng.random_range(0..special.len())],
                1 => f32::from_bits(rng.random()),
                _ => rng.random_range(0..5) as f32,
            })
            .collect();
        let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        let scheme = &schemes[n % 2];
        run_one("mask", n, &bytes, |_| {
            let mask = Volume::new(dims, data, affine).unwrap();
            let encoded = scheme.encode(&mask, Path::new("fuzz-mask.nii.gz"));
            if let Some(channels) = tally.count(encoded, "fuzz-mask.nii.gz") {
                assert_eq!(channels.len(), len * scheme.channels.len());
            }
        });
    }
    tally.print("");
    assert!(tally.refused > 0 && tally.ok > 0);
}

#[test]
fn fuzz_the_experiment_parser() {
    let _serial = crate::common::one_at_a_time();
    let _serial = serial();
    let tally = Tally::new("experiment");
    let seeds: Vec<String> = ["quickstart", "whole-head-128", "brats-192"]
        .iter()
        .map(|name| {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../experiments")
                .join(format!("{name}.toml"));
            std::fs::read_to_string(path).unwrap()
        })
        .collect();
    let tokens = [
        "0",
        "-1",
        "1e309",
        "nan",
        "inf",
        "-inf",
        "\"x\"",
        "[]",
        "[0]",
        "[1, 0]",
        "{}",
        "18446744073709551615",
        "9223372036854775807",
        "-9223372036854775808",
        "1.5",
        "true",
        "\"\"",
        "[[1]]",
        "65536",
        "4294967296",
    ];
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let (mut ok, mut err) = (0usize, 0usize);
    for n in 0..inputs_per_reader() {
        let seed = &seeds[n % seeds.len()];
        let mut lines: Vec<String> = seed.lines().map(str::to_string).collect();
        for _ in 0..rng.random_range(1..=3) {
            let i = rng.random_range(0..lines.len());
            match rng.random_range(0..4) {
                // Replace a value with an extreme or a wrong type.
                0 | 1 => {
                    if let Some((key, _)) = lines[i].split_once('=') {
                        let token = tokens[rng.random_range(0..tokens.len())];
                        lines[i] = format!("{key}= {token}");
                    }
                }
                2 => {
                    lines.remove(i);
                }
                _ => {
                    let text = mutate(&mut rng, lines[i].as_bytes());
                    lines[i] = String::from_utf8_lossy(&text).into_owned();
                }
            }
            if lines.is_empty() {
                break;
            }
        }
        let text = lines.join("\n");
        run_one(
            "experiment",
            n,
            text.as_bytes(),
            |_| match ExperimentConfig::from_toml(&text) {
                Ok(config) => match config.validate() {
                    Ok(()) => ok += 1,
                    Err(_) => err += 1,
                },
                Err(_) => err += 1,
            },
        );
    }
    Tally {
        ok,
        refused: err,
        ..tally
    }
    .print("");
    assert!(err > 0 && ok > 0);
}

/// Whether every float parameter holds only finite values.
struct AllFinite(bool);

impl<B: burn::tensor::backend::Backend> burn::module::ModuleVisitor<B> for AllFinite {
    fn visit_float<const D: usize>(
        &mut self,
        param: &burn::module::Param<burn::tensor::Tensor<B, D>>,
    ) {
        let values = param
            .val()
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .unwrap();
        self.0 &= values.iter().all(|v| v.is_finite());
    }
}

#[test]
fn fuzz_the_checkpoint_loader() {
    let _serial = crate::common::one_at_a_time();
    let _serial = serial();
    let tally = Tally::new("checkpoint");
    let device = Default::default();
    let config = UNetConfig {
        model_channels: 4,
        num_groups: 4,
        ..UNetConfig::tiny()
    };
    let configured: UNet<Flex> = config.init(&device).unwrap();
    let recorder = NamedMpkBytesRecorder::<FullPrecisionSettings>::new();
    let seed: Vec<u8> =
        Recorder::<Flex>::record(&recorder, configured.clone().into_record(), ()).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let (mut ok, mut err) = (0usize, 0usize);
    let file = Path::new("fuzz/ema.mpk");
    for n in 0..inputs_per_reader() {
        let input = mutate(&mut rng, &seed);
        run_one(
            "checkpoint",
            n,
            &input,
            |bytes| match medddpm_train::integrity::load_record_bytes(
                &configured,
                bytes.to_vec(),
                file,
                &device,
            ) {
                Ok(unet) => {
                    // What loads is usable: every weight a finite number, read back one by one.
                    let mut finite = AllFinite(true);
                    unet.visit(&mut finite);
                    assert!(finite.0, "a record with non-finite weights loaded");
                    ok += 1
                }
                Err(e) => {
                    assert!(e.to_string().contains("ema.mpk"), "unnamed: {e}");
                    err += 1;
                }
            },
        );
    }
    Tally {
        ok,
        refused: err,
        ..tally
    }
    .print("");
    assert!(err > 0);
}
