#!/usr/bin/env python3
"""Host time of cuDNN's legacy convolution calls, one shape repeated against shapes alternating.

The engine enqueues its convolutions with cuDNN's legacy API (`cudnnConvolutionForward`,
`...BackwardData`, `...BackwardFilter`) from cubecl's device thread. A host profile showed those
calls finalizing execution plans inside cuDNN. This measures, on small volumes (so the GPU keeps
up and the time measured is the host's), the microseconds one call takes to return when:

- `same`: one shape called over and over;
- `alternate`: several shapes in turn through one handle (a U-Net step);
- `handle-per-shape`: the same alternation, each shape with a cuDNN handle of its own.

Also `torch`: PyTorch's own `conv3d` (cuDNN's graph API with its plan cache) over the same
alternation, channels-last.

Usage: cudnn-legacy-overhead.py OUT.json [LIBCUDNN]   (needs PyTorch for buffers and the stream)
"""

import ctypes
import json
import sys
import time

import torch

# The system's cuDNN (what our binary loads) unless a path is given; PyTorch's own copy is another.
lib = ctypes.CDLL(sys.argv[2] if len(sys.argv) > 2 else "libcudnn.so.9")
c_int, c_void_p, c_size_t, c_float = ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_float

BF16, FLOAT = 9, 0
NHWC_FORMAT = 1
CROSS_CORRELATION = 1
TENSOR_OP_MATH = 1


class Perf(ctypes.Structure):
    _fields_ = [
        ("algo", c_int),
        ("status", c_int),
        ("time", c_float),
        ("memory", c_size_t),
        ("determinism", c_int),
        ("mathType", c_int),
        ("reserved", c_int * 3),
    ]


def check(status, what):
    if status != 0:
        raise RuntimeError(f"{what}: cuDNN status {status}")


def handle_on(stream):
    h = c_void_p()
    check(lib.cudnnCreate(ctypes.byref(h)), "cudnnCreate")
    check(lib.cudnnSetStream(h, c_void_p(stream)), "cudnnSetStream")
    return h


def tensor_desc(n, c, d, h, w):
    desc = c_void_p()
    check(lib.cudnnCreateTensorDescriptor(ctypes.byref(desc)), "create tensor")
    dims = (c_int * 5)(n, c, d, h, w)
    strides = (c_int * 5)(c * d * h * w, 1, h * w * c, w * c, c)
    check(lib.cudnnSetTensorNdDescriptor(desc, BF16, 5, dims, strides), "set tensor")
    return desc


def filter_desc(k, c):
    desc = c_void_p()
    check(lib.cudnnCreateFilterDescriptor(ctypes.byref(desc)), "create filter")
    dims = (c_int * 5)(k, c, 3, 3, 3)
    check(lib.cudnnSetFilterNdDescriptor(desc, BF16, NHWC_FORMAT, 5, dims), "set filter")
    return desc


def conv_desc():
    desc = c_void_p()
    check(lib.cudnnCreateConvolutionDescriptor(ctypes.byref(desc)), "create conv")
    one = (c_int * 3)(1, 1, 1)
    check(
        lib.cudnnSetConvolutionNdDescriptor(desc, 3, one, one, one, CROSS_CORRELATION, FLOAT),
        "set conv",
    )
    check(lib.cudnnSetConvolutionMathType(desc, TENSOR_OP_MATH), "math type")
    return desc


class Case:
    """One convolution shape: buffers, descriptors and the algorithms cuDNN's heuristics pick."""

    def __init__(self, handle, c, k, s):
        self.x = torch.randn(1, s, s, s, c, device="cuda", dtype=torch.bfloat16)
        self.w = torch.randn(k, 3, 3, 3, c, device="cuda", dtype=torch.bfloat16)
        self.y = torch.empty(1, s, s, s, k, device="cuda", dtype=torch.bfloat16)
        self.xd, self.yd = tensor_desc(1, c, s, s, s), tensor_desc(1, k, s, s, s)
        self.wd, self.cd = filter_desc(k, c), conv_desc()
        perf, n = (Perf * 8)(), c_int()
        check(lib.cudnnGetConvolutionForwardAlgorithm_v7(handle, self.xd, self.wd, self.cd, self.yd, 8, ctypes.byref(n), perf), "fwd algos")
        self.fwd = next(p for p in perf[: n.value] if p.status == 0)
        check(lib.cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, self.wd, self.yd, self.cd, self.xd, 8, ctypes.byref(n), perf), "bwd data algos")
        self.bwd = next(p for p in perf[: n.value] if p.status == 0)
        ws = max(self.fwd.memory, self.bwd.memory, 1)
        self.ws = torch.empty(ws, device="cuda", dtype=torch.uint8)
        self.alpha, self.beta = c_float(1.0), c_float(0.0)

    def forward(self, handle):
        check(
            lib.cudnnConvolutionForward(
                handle, ctypes.byref(self.alpha), self.xd, c_void_p(self.x.data_ptr()),
                self.wd, c_void_p(self.w.data_ptr()), self.cd, self.fwd.algo,
                c_void_p(self.ws.data_ptr()), c_size_t(self.ws.numel()),
                ctypes.byref(self.beta), self.yd, c_void_p(self.y.data_ptr()),
            ),
            "forward",
        )

    def backward_data(self, handle):
        check(
            lib.cudnnConvolutionBackwardData(
                handle, ctypes.byref(self.alpha), self.wd, c_void_p(self.w.data_ptr()),
                self.yd, c_void_p(self.y.data_ptr()), self.cd, self.bwd.algo,
                c_void_p(self.ws.data_ptr()), c_size_t(self.ws.numel()),
                ctypes.byref(self.beta), self.xd, c_void_p(self.x.data_ptr()),
            ),
            "backward data",
        )


def timed(calls, rounds=30):
    """Median over rounds of the host microseconds per call (the GPU synchronised between rounds)."""
    per_call = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for call in calls:
            call()
        per_call.append((time.perf_counter() - t0) / len(calls) * 1e6)
        torch.cuda.synchronize()
    per_call.sort()
    return per_call[len(per_call) // 2]


def main():
    out = sys.argv[1]
    stream = torch.cuda.current_stream().cuda_stream
    shared = handle_on(stream)
    shapes = [(64, 64, 16), (64, 128, 8), (128, 128, 8), (128, 64, 16)]
    cases = [Case(shared, c, k, s) for c, k, s in shapes]
    own = [handle_on(stream) for _ in cases]
    results = {"cudnn_version": lib.cudnnGetVersion(), "device": torch.cuda.get_device_name()}
    for op in ("forward", "backward_data"):
        run = lambda case, h: (lambda: getattr(case, op)(h))
        # Warm every (shape, handle) pair first.
        for case, h in zip(cases, own):
            for _ in range(3):
                run(case, shared)()
                run(case, h)()
        torch.cuda.synchronize()
        same = [run(cases[0], shared)] * 64
        alternate = [run(case, shared) for case in cases] * 16
        per_shape = [run(case, h) for case, h in zip(cases, own)] * 16
        results[op] = {
            "same_us": timed(same),
            "alternate_us": timed(alternate),
            "handle_per_shape_us": timed(per_shape),
        }
        print(op, json.dumps(results[op]), flush=True)
    cl = torch.channels_last_3d
    torch.backends.cudnn.benchmark = True
    convs = []
    for c, k, s in shapes:
        x = torch.randn(1, c, s, s, s, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
        w = torch.randn(k, c, 3, 3, 3, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
        convs.append(lambda x=x, w=w: torch.nn.functional.conv3d(x, w, padding=1))
    for _ in range(5):
        for conv in convs:
            conv()
    results["torch_forward"] = {
        "same_us": timed([convs[0]] * 64),
        "alternate_us": timed(convs * 16),
        "cudnn_version": torch.backends.cudnn.version(),
    }
    print("torch", json.dumps(results["torch_forward"]), flush=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
