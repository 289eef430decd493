#!/usr/bin/env python3
"""nnU-Net v2's own data set check on data sets `medddpm synthesize --dataset-layout nnunet`
makes: a whole-head model (one channel) trained briefly on 16^3 phantoms, and a BraTS-style
model (four modalities as four channels, labels 0-4) trained briefly on the shared BraTS case
at 16x16x12. Each data set goes through `nnunetv2.experiment_planning.verify_dataset_integrity.
verify_dataset_integrity(folder, num_processes=1)`; the script fails if either check raises.

    python3 -m venv /tmp/nnunet-venv && /tmp/nnunet-venv/bin/pip install nnunetv2
    cargo build -p medddpm
    /tmp/nnunet-venv/bin/python scripts/nnunet-check.py [--medddpm target/debug/medddpm] [--work DIR]

The models are barely trained (the images are noise-like): the check is about the files,
their geometry and labels, and dataset.json, not the pictures. Output: docs/synthesize.md.
"""

import argparse
import os
import subprocess
import sys
import tempfile

from tiny_experiment import tiny_experiment

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The data and training of the two tiny experiments (`tiny_experiment.py`).
WHOLE_HEAD = dict(
    data='source = {{ layout = "phantom", dir = "{work}/phantoms", count = 2, size = [16, 16, 16], seed = 3 }}',
    train="steps = 2\nsave_every = 2\nsamples_per_checkpoint = 0\nema_start = 1",
)
BRATS = dict(
    data='source = {{ layout = "brats", root = "{brats}" }}\ngrid = [16, 16, 12]\ngrid_policy = "resize"',
    train=WHOLE_HEAD["train"],
    in_channels=8,
    out_channels=4,
)


def run(cmd):
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def make(medddpm, work, name, toml, masks, count, dataset_id):
    """Trains `toml` briefly and synthesizes `count` pairs in the nnU-Net layout."""
    exp = os.path.join(work, f"{name}.toml")
    with open(exp, "w") as f:
        f.write(toml)
    run_dir = os.path.join(work, f"{name}-run")
    run([medddpm, "train", "--backend", "cpu", "--experiment", exp, "--run-dir", run_dir])
    out = os.path.join(work, f"{name}-synth")
    run([medddpm, "synthesize", "--backend", "cpu", "--checkpoint", run_dir, "--masks", masks,
         "--out", out, "--count", str(count), "--steps", "5", "--dataset-layout", "nnunet",
         "--dataset-id", str(dataset_id), "--dataset-name", name])
    return os.path.join(out, f"Dataset{dataset_id:03d}_{name}")


def complete_brats(source, work):
    """A BraTS root in `work` linking the cases of `source` that have every modality."""
    source = os.path.abspath(source)
    root = os.path.join(work, "brats")
    mods = ["t1", "t1ce", "t2", "flair"]
    for folder in mods + ["seg"]:
        os.makedirs(os.path.join(root, folder), exist_ok=True)
    for name in sorted(os.listdir(os.path.join(source, "seg"))):
        case = name[: -len("_seg.nii.gz")]
        files = {m: os.path.join(source, m, f"{case}_{m}.nii.gz") for m in mods + ["seg"]}
        if all(os.path.isfile(f) for f in files.values()):
            for m, f in files.items():
                link = os.path.join(root, m, os.path.basename(f))
                if not os.path.exists(link):
                    os.symlink(f, link)
    return root


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--medddpm", default=os.path.join(ROOT, "target/debug/medddpm"))
    parser.add_argument("--work", default=None, help="folder for the runs (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="nnunet-check-")
    os.makedirs(work, exist_ok=True)
    shared = os.environ.get("MEDDDPM_SHARED_DIR", os.path.join(ROOT, "..", "shared"))
    brats = complete_brats(os.path.join(shared, "datasets/medddpm-samples/brats2021"), work)
    # nnunetv2 reads these at import; the check itself uses none of them.
    for var in ("nnUNet_raw", "nnUNet_preprocessed", "nnUNet_results"):
        os.environ.setdefault(var, os.path.join(work, var))
    from nnunetv2.experiment_planning.verify_dataset_integrity import verify_dataset_integrity
    from importlib.metadata import version
    print(f"nnunetv2 {version('nnunetv2')}, python {sys.version.split()[0]}")
    sets = [
        make(args.medddpm, work, "WholeHeadTiny", tiny_experiment(**WHOLE_HEAD).format(work=work),
             os.path.join(work, "phantoms/mask"), 4, 501),
        make(args.medddpm, work, "BratsTiny", tiny_experiment(**BRATS).format(brats=brats),
             os.path.join(brats, "seg"), 3, 502),
    ]
    for folder in sets:
        print(f"\n== verify_dataset_integrity({os.path.basename(folder)}, num_processes=1)", flush=True)
        with open(os.path.join(folder, "dataset.json")) as f:
            print(f.read())
        print("files:", sorted(os.listdir(os.path.join(folder, "imagesTr"))),
              sorted(os.listdir(os.path.join(folder, "labelsTr"))), flush=True)
        verify_dataset_integrity(folder, num_processes=1)
    print("both data sets passed nnU-Net's check")


if __name__ == "__main__":
    main()
