#!/usr/bin/env python3
"""cuDNN (through PyTorch) on the U-Net's first and last convolutions with their few channels
padded by zeros: channels-last 3D, bf16, 128^3, 3x3x3, forward and weight gradient, median of
20 timed calls. Says which padding medddpm-kernels' cuDNN engine should use (same cuDNN major
version; PyTorch brings its own build)."""
import json
import torch

torch.backends.cudnn.benchmark = True
dev = "cuda"
res = []


def timed(fn, n=20):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2]


for c_in, c_out in [(3, 64), (8, 64), (16, 64), (32, 64), (64, 64), (64, 1), (64, 8), (64, 16)]:
    x = torch.randn(1, c_in, 128, 128, 128, device=dev, dtype=torch.bfloat16).to(memory_format=torch.channels_last_3d)
    w = torch.randn(c_out, c_in, 3, 3, 3, device=dev, dtype=torch.bfloat16).to(memory_format=torch.channels_last_3d)
    y = torch.nn.functional.conv3d(x, w, padding=1)
    dy = torch.randn_like(y)
    fwd = timed(lambda: torch.nn.functional.conv3d(x, w, padding=1))
    wgrad = timed(lambda: torch.ops.aten.convolution_backward(dy, x, w, None, [1, 1, 1], [1, 1, 1], [1, 1, 1], False, [0, 0, 0], 1, [False, False, True]))
    dgrad = timed(lambda: torch.ops.aten.convolution_backward(dy, x, w, None, [1, 1, 1], [1, 1, 1], [1, 1, 1], False, [0, 0, 0], 1, [True, False, False]))
    r = dict(c_in=c_in, c_out=c_out, forward_ms=round(fwd, 3), weight_grad_ms=round(wgrad, 3), data_grad_ms=round(dgrad, 3))
    print(json.dumps(r), flush=True)
    res.append(r)
print(torch.__version__, torch.backends.cudnn.version())
