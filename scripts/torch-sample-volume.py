#!/usr/bin/env python3
"""The PyTorch reference's own sampler as its users run it (`GaussianDiffusion.sample`: 250
DDPM steps, fp32 with TF32 and `cudnn.benchmark`, as released) on the whole-head model at 128^3,
batch 1, timed from the first step to the volume on the device: seconds a volume and volumes an
hour, beside `medddpm synthesize`'s (issue 40). Weights are random: the time does not depend on
them. Needs the reference's diffusion_model/ package in --reference (../shared/peer/README.md).

    python3 scripts/torch-sample-volume.py --volumes 2
"""
import argparse, json, os, sys, time, types

sys.modules['nibabel'] = types.ModuleType('nibabel')
p = argparse.ArgumentParser()
p.add_argument('--size', type=int, default=128)
p.add_argument('--ch', type=int, default=64)
p.add_argument('--volumes', type=int, default=2)
p.add_argument('--reference', default='.device-peer/medddpm')
a = p.parse_args()
sys.path.insert(0, a.reference)
import torch
import tqdm as _tqdm
from diffusion_model.unet import create_model
from diffusion_model import trainer as _trainer
_trainer.tqdm = lambda it, **kw: it  # no progress bar in the log
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.backends.cudnn.benchmark = True
torch.manual_seed(0)
dev = 'cuda'
model = create_model(a.size, a.ch, 1, in_channels=3, out_channels=1).to(dev).eval()
diff = _trainer.GaussianDiffusion(model, image_size=a.size, depth_size=a.size, timesteps=250,
                                  loss_type='l1', with_condition=True, channels=1).to(dev)
c = (torch.rand(1, 2, a.size, a.size, a.size, device=dev) > 0.5).float().mul(2).sub(1)
seconds = []
for i in range(a.volumes):
    torch.cuda.synchronize(); t0 = time.time()
    img = diff.sample(batch_size=1, condition_tensors=c)
    torch.cuda.synchronize(); seconds.append(time.time() - t0)
    print(json.dumps({'volume': i, 'seconds': round(seconds[-1], 2)}), flush=True)
best = min(seconds[1:] or seconds)
print(json.dumps({'sampler': 'reference DDPM, 250 steps, TF32', 'seconds': seconds,
                  'seconds_per_volume_after_first': best, 'volumes_per_hour': round(3600 / best, 1),
                  'torch': torch.__version__, 'cudnn': torch.backends.cudnn.version()}))
