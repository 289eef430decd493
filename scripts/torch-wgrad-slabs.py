#!/usr/bin/env python3
"""Times cuDNN's weight gradient of a 3x3x3 convolution at 128^3 through PyTorch, the way
our engine computes it and in depth slabs, to see whether more independent work helps TF32.

A weight gradient is a product of Cout x (Cin * 27) summed over the volume: at 64 x 3,456 with
64x64 tiles that is 54 tiles for 132 SMs. Cutting the depth into S slabs (each with its one-voxel
halo) and giving them to cuDNN as S groups of a grouped convolution makes S independent
products; their S results summed are the gradient. Also as a batch of S slabs (one product
summed over the batch, no more tiles unless the kernel splits the sum).

Prints one JSON line per case: ms (median of 20 after 5 warm-up, CUDA events), and the largest
difference from the plain gradient (TF32 against TF32).
Usage: python3 scripts/torch-wgrad-slabs.py [--size 128] [--slabs 2,3,4,8] (--slabs "": plain only)
"""
import argparse
import json

import torch

p = argparse.ArgumentParser()
p.add_argument("--size", type=int, default=128)
p.add_argument("--slabs", default="2,3,4,8")
args = p.parse_args()

torch.backends.cudnn.benchmark = True
torch.backends.cudnn.allow_tf32 = True
torch.backends.cuda.matmul.allow_tf32 = True
dev = "cuda"


def wgrad(dy, x, w_shape, groups=1, padding=(1, 1, 1)):
    w = torch.empty(w_shape, device=dev, dtype=x.dtype)
    return torch.ops.aten.convolution_backward(
        dy, x, w, None, (1, 1, 1), padding, (1, 1, 1), False, (0, 0, 0), groups,
        (False, True, False))[1]


def timed(fn):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(20):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def layout(t, channels_last):
    return t.contiguous(memory_format=torch.channels_last_3d) if channels_last else t.contiguous()


n = args.size
for cin, cout in ((128, 64), (64, 64)):
    for dtype, name in ((torch.float32, "tf32"), (torch.bfloat16, "bf16")):
        for cl in (True, False):
            g = torch.Generator(device=dev).manual_seed(0)
            x = layout(torch.randn(1, cin, n, n, n, device=dev, generator=g).to(dtype), cl)
            dy = layout(torch.randn(1, cout, n, n, n, device=dev, generator=g).to(dtype), cl)
            shape = (cout, cin, 3, 3, 3)
            ref = wgrad(dy, x, shape).float()
            row = dict(cin=cin, cout=cout, size=n, precision=name,
                       layout="ndhwc" if cl else "ncdhw")
            print(json.dumps(dict(row, case="plain", ms=round(timed(lambda: wgrad(dy, x, shape)), 3))),
                  flush=True)
            if name == "bf16" or not cl:
                continue
            xp = torch.nn.functional.pad(x, (0, 0, 0, 0, 1, 1))
            for s in (int(v) for v in args.slabs.split(",") if v):
                if n % s:
                    continue
                d = n // s
                # Slabs as groups: channels s*cin (slab-major), depth d + 2.
                xg = layout(torch.cat([xp[:, :, i * d:i * d + d + 2] for i in range(s)], 1), cl)
                dyg = layout(torch.cat([dy[:, :, i * d:(i + 1) * d] for i in range(s)], 1), cl)
                gshape = (s * cout, cin, 3, 3, 3)
                f = lambda: wgrad(dyg, xg, gshape, groups=s, padding=(0, 1, 1))
                out = f().float().view(s, cout, cin, 3, 3, 3).sum(0)
                err = (out - ref).abs().max().item() / ref.abs().max().item()
                gather = lambda: (torch.cat([xp[:, :, i * d:i * d + d + 2] for i in range(s)], 1)
                                  .contiguous(memory_format=torch.channels_last_3d))
                print(json.dumps(dict(row, case=f"groups{s}", ms=round(timed(f), 3),
                                      gather_x_ms=round(timed(gather), 3),
                                      rel_err=float(f"{err:.2e}"))), flush=True)
                # Slabs as a batch.
                xb = layout(torch.cat([xp[:, :, i * d:i * d + d + 2] for i in range(s)], 0), cl)
                dyb = layout(torch.cat([dy[:, :, i * d:(i + 1) * d] for i in range(s)], 0), cl)
                fb = lambda: wgrad(dyb, xb, shape, padding=(0, 1, 1))
                err = (fb().float() - ref).abs().max().item() / ref.abs().max().item()
                print(json.dumps(dict(row, case=f"batch{s}", ms=round(timed(fb), 3),
                                      rel_err=float(f"{err:.2e}"))), flush=True)
            del xp
            torch.cuda.empty_cache()
