"""The tiny experiment the CPU check scripts train (`nnunet-check.py`, `tensorboard-check.py`):
the two-level network of C = 8 with 50 timesteps, which trains in seconds on a CPU, with the
caller's data source and training steps."""


def tiny_experiment(data, train, in_channels=3, out_channels=1):
    """An experiment TOML: the tiny network for `in_channels` inputs (noisy images and mask
    channels) and `out_channels` images, then `data` and `train` as the sections' lines."""
    return f"""[model]
in_channels = {in_channels}
out_channels = {out_channels}
model_channels = 8
channel_mult = [1, 2]
attention_resolutions = []
image_size = 16
num_groups = 8

[diffusion]
timesteps = 50

[data]
{data.strip()}

[train]
{train.strip()}
"""
