#!/usr/bin/env python3
"""TensorBoard's own reader on the event files `medddpm train` writes (issue 40).

Trains a tiny model on the CPU (16^3 phantoms, 4 optimizer steps, a checkpoint and a sample every
2), then imitates a crash after step 4 was logged but before its checkpoint was published
(removes checkpoints/step-000004) and resumes, which trains steps 3 and 4 again. TensorBoard's
`EventAccumulator` (every size guidance 0: keep everything) then reads the run folder and this
script prints its tags, the steps of every scalar, the size of every picture and the first line
of the settings text, and checks that:
- train/loss holds steps 1-4 once each, equal to metrics.jsonl's losses (the restart mark of the
  resumed session made TensorBoard drop the crashed session's steps 3 and 4);
- train/lr and train/grad_norm are there for each step;
- every periodic sample (steps 2 and 4) has its axial, coronal and sagittal picture, and each
  decodes as a PNG of the size the event states;
- the settings text holds the experiment's TOML.
Then `tensorboard --logdir runs/ --load_fast=true` (its Rust data server, what the web page shows)
is asked over HTTP for the same loss curve, the pictures and the text.
Exits 1 on a failed check. Needs `pip install tensorboard` (a venv: see docs/tensorboard.md).

Usage: python scripts/tensorboard-check.py [--medddpm target/debug/medddpm] [--keep DIR] [--no-serve]"""
import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import socket
import tempfile
import time
import urllib.parse
import urllib.request

import numpy as np
from PIL import Image
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.util import tensor_util

from tiny_experiment import tiny_experiment

EXPERIMENT = tiny_experiment(
    data='source = {{ layout = "phantom", dir = "{phantoms}", count = 2, size = [16, 16, 16], seed = 3 }}',
    train="""steps = 4
lr = 1e-3
batch_size = 1
grad_accum = 2
save_every = 2
samples_per_checkpoint = 1
keep_checkpoints = 0
ema_start = 2
seed = 11""",
)


def train(medddpm, args):
    print('$ medddpm ' + ' '.join(args), flush=True)
    subprocess.run([medddpm] + args, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    target = os.environ.get('CARGO_TARGET_DIR', 'target')
    parser.add_argument('--medddpm', default=os.path.join(target, 'debug', 'medddpm'))
    parser.add_argument('--keep', help='train in this folder (kept) instead of a temporary one')
    parser.add_argument('--no-serve', action='store_true', help='skip the web server check')
    opts = parser.parse_args()
    work = opts.keep or tempfile.mkdtemp(prefix='tb-check-')
    os.makedirs(work, exist_ok=True)
    run = os.path.join(work, 'runs', 'tiny')
    experiment = os.path.join(work, 'tiny.toml')
    with open(experiment, 'w') as f:
        f.write(EXPERIMENT.format(phantoms=os.path.join(work, 'phantoms')))
    try:
        train(opts.medddpm, ['train', '--backend', 'cpu', '--experiment', experiment,
                             '--run-dir', run])
        shutil.rmtree(os.path.join(run, 'checkpoints', 'step-000004'))
        print('(removed checkpoints/step-000004: a crash before its publication)')
        train(opts.medddpm, ['train', '--backend', 'cpu', '--resume', run])
        failures = check(run)
        if not opts.no_serve:
            failures += serve_check(os.path.dirname(run), 'tiny', run)
    finally:
        if not opts.keep:
            shutil.rmtree(work)
    for f in failures:
        print('FAILED: ' + f)
    print('OK' if not failures else f'{len(failures)} check(s) failed')
    return 1 if failures else 0


def check(run):
    files = sorted(n for n in os.listdir(run) if 'tfevents' in n)
    print(f'event files: {len(files)}')
    acc = event_accumulator.EventAccumulator(
        run, size_guidance={k: 0 for k in event_accumulator.DEFAULT_SIZE_GUIDANCE})
    acc.Reload()
    tags = acc.Tags()
    print('tags:', json.dumps({k: v for k, v in tags.items() if v}, sort_keys=True))
    failures = []
    for tag in sorted(tags['scalars']):
        events = acc.Scalars(tag)
        print(f'scalars {tag}: {len(events)} at steps {[e.step for e in events]}')
    with open(os.path.join(run, 'metrics.jsonl')) as f:
        metrics = [json.loads(line) for line in f]
    loss = acc.Scalars('train/loss')
    if [e.step for e in loss] != [m['step'] for m in metrics] or len(metrics) != 4:
        failures.append('train/loss steps differ from metrics.jsonl')
    elif any(np.float32(e.value) != np.float32(m['loss']) for e, m in zip(loss, metrics)):
        failures.append('train/loss values differ from metrics.jsonl')
    for tag in ['train/lr', 'train/grad_norm']:
        if tag not in tags['scalars'] or len(acc.Scalars(tag)) != 4:
            failures.append(f'{tag}: not one value per step')
    for tag in sorted(tags['images']):
        images = acc.Images(tag)
        sizes = []
        for e in images:
            png = Image.open(io.BytesIO(e.encoded_image_string))
            if png.format != 'PNG' or png.size != (e.width, e.height):
                failures.append(f'{tag} step {e.step}: not a {e.width}x{e.height} PNG')
            sizes.append(f'{e.width}x{e.height}')
        print(f'images {tag}: {len(images)} at steps {[e.step for e in images]}, {sizes}')
    planes = {t.rsplit('/', 1)[-1] for t in tags['images']}
    if planes != {'axial', 'coronal', 'sagittal'}:
        failures.append(f'sample planes: {sorted(planes)}')
    if any([e.step for e in acc.Images(t)] != [2, 4] for t in tags['images']):
        failures.append('a sample picture is not there for steps 2 and 4')
    for e in acc.Tensors('settings') if 'settings' in tags['tensors'] else []:
        text = tensor_util.make_ndarray(e.tensor_proto).item().decode()
        print(f'text settings step {e.step}: {text.splitlines()[0]!r}, {len(text)} characters')
        if '[train]' not in text or 'tensorboard = true' not in text:
            failures.append('the settings text lacks the experiment')
    if 'settings' not in tags['tensors']:
        failures.append('no settings text')
    return failures


def serve_check(logdir, name, run):
    """The curve, pictures and text as `tensorboard --logdir` serves them to its web page."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, '-m', 'tensorboard.main', '--logdir', logdir, '--port', str(port),
         '--host', '127.0.0.1', '--load_fast=true'],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f'http://127.0.0.1:{port}/data'

    def get(path, **query):
        url = f'{base}/{path}?{urllib.parse.urlencode(query)}' if query else f'{base}/{path}'
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read())

    failures = []
    try:
        points = []
        for _ in range(120):  # the server loads the folder in the background
            try:
                points = get('plugin/scalars/scalars', run=name, tag='train/loss')
                if len(points) >= 4:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        print(f'tensorboard --load_fast=true: runs {get("runs")}')
        print(f'  train/loss: steps {[p[1] for p in points]}')
        with open(os.path.join(run, 'metrics.jsonl')) as f:
            metrics = [json.loads(line) for line in f]
        if [(p[1], np.float32(p[2])) for p in points] != \
                [(m['step'], np.float32(m['loss'])) for m in metrics]:
            failures.append('served train/loss differs from metrics.jsonl')
        tags = get('plugin/images/tags')[name]
        for tag in sorted(tags):
            shown = get('plugin/images/images', run=name, tag=tag, sample=0)
            print(f'  image {tag}: steps {[i["step"] for i in shown]}')
            if [i['step'] for i in shown] != [2, 4]:
                failures.append(f'served {tag}: not steps 2 and 4')
        if len(tags) != 3:
            failures.append(f'served image tags: {sorted(tags)}')
        text = get('plugin/text/text', run=name, tag='settings')
        print(f'  text settings: steps {[t["step"] for t in text]}')
        if not text or not all('[train]' in t['text'] for t in text):
            failures.append('served settings text lacks the experiment')
    finally:
        server.terminate()
        server.wait()
    return failures


if __name__ == '__main__':
    sys.exit(main())
