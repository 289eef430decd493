#!/usr/bin/env python3
"""Metric against number of steps for each sampler, on a trained run (the quickstart's by default).

For every sampler setting: `medddpm sample` for the first MASKS phantom masks, SAMPLES each,
timed; then `medddpm eval` against the phantom images. Writes sweep.jsonl, sweep.md and (if
matplotlib is installed) sweep.png into OUT. Usage:
    scripts/sampler-sweep.py [RUN] [OUT] [MASKS] [SAMPLES]
    scripts/sampler-sweep.py --plot-only OUT      # redraw sweep.png from OUT/sweep.jsonl
Environment: MEDDDPM_BIN (default target/release/medddpm), PHANTOMS (default runs/phantoms).
"""
import json, os, subprocess, sys, time, pathlib, shutil

plot_only = len(sys.argv) > 2 and sys.argv[1] == "--plot-only"
if plot_only:
    sys.argv = [sys.argv[0], "runs/quickstart", sys.argv[2]]
run = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "runs/quickstart")
out = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else "runs/sampler-sweep")
n_masks = int(sys.argv[3]) if len(sys.argv) > 3 else 4
n_samples = int(sys.argv[4]) if len(sys.argv) > 4 else 2
binary = os.environ.get("MEDDDPM_BIN", "target/release/medddpm")
phantoms = pathlib.Path(os.environ.get("PHANTOMS", "runs/phantoms"))
settings = [("ddpm", 250)] + [(k, s) for k in ("ddim", "dpm-solver++") for s in (10, 25, 50)]

out.mkdir(parents=True, exist_ok=True)
masks = out / "masks"
if plot_only:
    settings = []
else:
    if masks.exists():
        shutil.rmtree(masks)
    masks.mkdir()
    for m in sorted((phantoms / "mask").glob("*.nii.gz"))[:n_masks]:
        shutil.copy(m, masks / m.name)

rows = []
for kind, steps in settings:
    name = f"{kind}-{steps}"
    dest = out / name
    if dest.exists():
        shutil.rmtree(dest)
    args = [binary, "sample", "--checkpoint", str(run), "--masks", str(masks), "--out", str(dest),
            "--samples-per-mask", str(n_samples), "--seed", "11", "--backend", "cpu",
            "--sampler", kind, "--steps", str(steps)]
    t0 = time.time()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = (time.time() - t0) / (n_masks * n_samples)
    subprocess.run([binary, "eval", "--masks", str(masks), "--real", str(phantoms / "image"),
                    "--synthetic", str(dest), "--out", str(dest / "eval")],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report = json.loads((dest / "eval" / "eval.json").read_text())
    mean = report["paired"]["mean"]
    adherence = report["adherence"]
    def labelled(k):
        return [l for s in adherence["synthetic"] for l in s["labels"] if l["label"] == k]
    background, head, tumour = labelled(0), labelled(1), labelled(2)
    row = {
        "sampler": kind, "steps": steps, "seconds_per_sample": round(seconds, 2),
        "psnr": mean["psnr"], "ssim": mean["ssim"], "mae": mean["mae"],
        "mmd2": report["mmd"]["value"], "dice": adherence["mean_dice_synthetic"],
        "background_mean": sum(l["mean"] for l in background) / len(background),
        "background_std": sum(l["std"] for l in background) / len(background),
        "head_mean": sum(l["mean"] for l in head) / len(head),
        "tumour_mean": sum(l["mean"] for l in tumour) / len(tumour),
    }
    rows.append(row)
    print(json.dumps(row), flush=True)

if plot_only:
    rows = [json.loads(l) for l in (out / "sweep.jsonl").read_text().splitlines()]
else:
    (out / "sweep.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
head = "| sampler | steps | s / sample | PSNR (dB) | SSIM | MAE | MMD^2 | mean Dice | background mean | background std | head mean | tumour mean |\n"
head += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
body = "".join(
    f"| {r['sampler']} | {r['steps']} | {r['seconds_per_sample']:.2f} | {r['psnr']:.2f} | {r['ssim']:.4f} | "
    f"{r['mae']:.4f} | {r['mmd2']:.4f} | {r['dice']:.4f} | {r['background_mean']:.3f} | {r['background_std']:.3f} | "
    f"{r.get('head_mean', float('nan')):.3f} | {r.get('tumour_mean', float('nan')):.3f} |\n"
    for r in rows)
(out / "sweep.md").write_text(head + body)
print(head + body)
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    ddpm = rows[0]
    for ax, key, label in zip(axes, ("psnr", "ssim", "dice"), ("PSNR (dB)", "SSIM", "mean Dice")):
        for kind, marker in (("ddim", "o"), ("dpm-solver++", "s")):
            pts = [(r["steps"], r[key]) for r in rows if r["sampler"] == kind]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=kind)
        ax.axhline(ddpm[key], color="k", linestyle="--", label="ddpm 250")
        ax.set_xscale("log"); ax.set_xlabel("network calls per sample"); ax.set_ylabel(label)
        ax.minorticks_off()
        ax.set_xticks([10, 25, 50]); ax.set_xticklabels(["10", "25", "50"])
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out / "sweep.png", dpi=110)
except ImportError:
    print("matplotlib not installed: no sweep.png", file=sys.stderr)
