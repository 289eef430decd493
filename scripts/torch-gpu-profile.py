# Where the GPU time of the PyTorch reference's training micro-step and sampling step goes:
# the same set-up as ../shared/peer/torch_bench.py (whole-head model, 128^3, batch 1), timed
# with CUDA events, then a few steps under PyTorch's profiler (CUPTI), whose kernels are summed
# by operation class with the classifier `medddpm bench --gpu-trace` uses (gpu_classes.json).
#
#   python3 torch-gpu-profile.py --config bf16_fix --compile 1 --steps 10 --profiled 4
# Needs the reference's diffusion_model/ package in the folder --reference names (default
# .device-peer/medddpm; ../shared/peer/README.md says which files). Prints one JSON line:
# wall ms per step, GPU busy ms per step (union of kernel intervals),
# kernel ms per step by class, launches per step and the 25 costliest kernels.
import sys, types, os, json, argparse, re
sys.modules['nibabel'] = types.ModuleType('nibabel')
here = os.path.dirname(os.path.abspath(__file__))
p = argparse.ArgumentParser()
p.add_argument('--config', default='bf16_fix')
p.add_argument('--size', type=int, default=128)
p.add_argument('--ch', type=int, default=64)
p.add_argument('--steps', type=int, default=10)
p.add_argument('--profiled', type=int, default=4)
p.add_argument('--compile', type=int, default=1)
p.add_argument('--classes', default=os.path.join(here, '..', 'crates', 'medddpm-bench', 'gpu_classes.json'))
p.add_argument('--reference', default='.device-peer/medddpm')
a = p.parse_args()
sys.path.insert(0, a.reference)
import torch
from torch.profiler import profile, ProfilerActivity
from diffusion_model.unet import create_model
from diffusion_model.trainer import GaussianDiffusion
import diffusion_model.modules as _M
if 'fix' in a.config:
    _M.AttentionBlock.forward = lambda self, x: self._forward(x)
bf16 = 'bf16' in a.config
tf32 = 'tf32' in a.config
torch.backends.cuda.matmul.allow_tf32 = tf32
torch.backends.cudnn.allow_tf32 = tf32
torch.backends.cudnn.benchmark = True
torch.manual_seed(0)
dev = 'cuda'
model = create_model(a.size, a.ch, 1, in_channels=3, out_channels=1).to(dev)
diff = GaussianDiffusion(model, image_size=a.size, depth_size=a.size, timesteps=250,
                         loss_type='l1', with_condition=True, channels=1).to(dev)
opt = torch.optim.Adam(diff.parameters(), lr=1e-5, fused=('fix' in a.config))
x = torch.rand(1, 1, a.size, a.size, a.size, device=dev) * 2 - 1
c = (torch.rand(1, 2, a.size, a.size, a.size, device=dev) > 0.5).float().mul(2).sub(1)
MODES = {1: 'default', 2: 'reduce-overhead', 3: 'max-autotune'}
fwd = torch.compile(diff, mode=MODES[a.compile]) if a.compile else diff


def train_step():
    with torch.autocast('cuda', dtype=torch.bfloat16, enabled=bf16):
        loss = fwd(x, condition_tensors=c)
    loss.backward()
    opt.step(); opt.zero_grad(set_to_none=True)


def sample_step():
    with torch.no_grad(), torch.autocast('cuda', dtype=torch.bfloat16, enabled=bf16):
        t = torch.full((1,), 100, device=dev, dtype=torch.long)
        return diff.p_sample(x, t, condition_tensors=c)


rules = json.load(open(a.classes))['rules']


def classify(name):
    low = name.lower()
    for rule in rules:
        if re.search(rule['pattern'], low):
            return rule['class']
    return 'other'


def union_ms(intervals):
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s; end = e
        elif e > end:
            total += e - end; end = e
    return total / 1e3


def measure(step, label):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(a.steps):
        s.record(); step(); e.record(); torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(a.profiled):
            step()
        torch.cuda.synchronize()
    kernels = [ev for ev in prof.events() if ev.device_type == torch.autograd.DeviceType.CUDA]
    intervals, by_class, by_name = [], {}, {}
    for ev in kernels:
        start, dur = ev.time_range.start, ev.time_range.end - ev.time_range.start
        intervals.append((start, start + dur))
        cls = 'copies' if 'memcpy' in ev.name.lower() or 'memset' in ev.name.lower() else classify(ev.name)
        by_class[cls] = by_class.get(cls, 0.0) + dur / 1e3 / a.profiled
        name = ev.name[:120]
        n, t = by_name.get(name, (0, 0.0))
        by_name[name] = (n + 1, t + dur / 1e3 / a.profiled)
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:25]
    return {
        'step': label,
        'wall_ms_median': times[len(times) // 2],
        'wall_ms_min': times[0],
        'gpu_busy_ms': union_ms(intervals) / a.profiled,
        'kernel_ms': sum(by_class.values()),
        'launches': len(kernels) / a.profiled,
        'by_class_ms': {k: round(v, 3) for k, v in sorted(by_class.items(), key=lambda kv: -kv[1])},
        'top': [{'name': k, 'calls': n / a.profiled, 'ms': round(t, 3)} for k, (n, t) in top],
    }


res = {'config': a.config, 'compile': a.compile, 'size': a.size}
try:
    res['train'] = measure(train_step, 'train')
    if a.compile:
        diff.denoise_fn = torch.compile(model, mode=MODES[a.compile])
    res['sample'] = measure(sample_step, 'sample')
except Exception as ex:
    import traceback; traceback.print_exc()
    res['error'] = repr(ex)[:300]
print(json.dumps(res), flush=True)
