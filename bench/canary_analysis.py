#!/usr/bin/env python3
"""What the canary analysis adds to a canary's time out of service, in the lab and modelled
for a real host (bench/README.md, "Canary analysis").

In the lab: starts the vLLM stand-in (lab/standin/vllm) with the lab's pacing (STANDIN_TTFT_S,
STANDIN_TOKEN_S: the lab inventory leaves them at their defaults) and runs what the rollout runs
on a canary with inkling.fleet.vllm_analysis's own client: the shipped golden set and the load of
the rollout's defaults, once as the old version's baseline and once as the new version's check;
a later host runs the golden set only. Each figure is the median of --runs.

For a real host: the golden set is asked one prompt at a time, so it costs about
  sum over prompts (TTFT + answer tokens / single-stream tokens/s),
and the load costs about TTFT under load + max_tokens / per-stream tokens/s at that concurrency,
twice on a canary (old, new). The answer tokens are those the stand-in answered (its answers are
as short as the prompts ask for); the throughput figures are arguments.

Usage: .venv/bin/python bench/canary_analysis.py [--runs 3] [--requests 16] [--max-tokens 128]
           [--real-tps 140 40] [--real-load-tps 60 20] [--real-ttft 0.3 1.0] [--quick]
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, 'collections'))
from ansible_collections.inkling.fleet.plugins.module_utils import analysis  # noqa: E402
from ansible_collections.inkling.fleet.plugins.modules import vllm_analysis  # noqa: E402

REPO_ID = 'thinkingmachines/Inkling-NVFP4'
REV = '0' * 40
MODEL = 'inkling'


def hub(root):
    repo = os.path.join(root, 'models--' + REPO_ID.replace('/', '--'))
    snap = os.path.join(repo, 'snapshots', REV)
    os.makedirs(os.path.join(repo, 'blobs'))
    os.makedirs(os.path.join(repo, 'refs'))
    os.makedirs(snap)
    with open(os.path.join(repo, 'refs', 'main'), 'w') as fh:
        fh.write(REV)
    files = {'config.json': '{"model_type": "inkling"}',
             'model.safetensors.index.json': json.dumps({'weight_map': {'a': 'model-1.safetensors'}}),
             'model-1.safetensors': 'x'}
    for i, (name, text) in enumerate(sorted(files.items())):
        blob = os.path.join(repo, 'blobs', '%064d' % i)
        with open(blob, 'w') as fh:
            fh.write(text)
        os.symlink(os.path.join('..', '..', 'blobs', os.path.basename(blob)), os.path.join(snap, name))


def start(tmp):
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith(('STANDIN_', 'VLLM_', 'HF_')))
    env.update({'HF_HUB_CACHE': os.path.join(tmp, 'hub'), 'HF_HUB_OFFLINE': '1',
                'VLLM_CACHE_ROOT': os.path.join(tmp, 'cache')})
    proc = subprocess.Popen([sys.executable, os.path.join(REPO, 'lab', 'standin', 'vllm'), 'serve', '--model', REPO_ID,
                             '--served-model-name', MODEL, '--host', '127.0.0.1', '--port', str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(('127.0.0.1', port), timeout=0.5).close()
            return proc, 'http://127.0.0.1:%d' % port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit('the stand-in did not open its port')


def golden(client, prompts):
    """(seconds, answer tokens per prompt, every prompt passed)."""
    t0 = time.time()
    tokens, ok = [], True
    for q in prompts:
        ans = client.chat(analysis.chat_request(q, MODEL))
        ok = ok and analysis.judge_prompt(q, ans)['passed']
        tokens.append(int(ans.get('tokens') or 0))
    return time.time() - t0, tokens, ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    ap.add_argument('--runs', type=int, default=3)
    ap.add_argument('--requests', type=int, default=16)
    ap.add_argument('--max-tokens', type=int, default=128)
    ap.add_argument('--real-tps', type=float, nargs='+', default=[140.0, 40.0],
                    help='single-stream output tokens/s of a real host (default: 140, the 4x GB200 headline '
                         'without MTP; 40, an assumed Hopper fallback)')
    ap.add_argument('--real-load-tps', type=float, nargs='+', default=[60.0, 20.0],
                    help='per-stream output tokens/s at the load\'s concurrency, one per --real-tps (assumed)')
    ap.add_argument('--real-ttft', type=float, nargs='+', default=[0.3, 1.0],
                    help='TTFT in seconds, one per --real-tps (assumed)')
    ap.add_argument('--quick', action='store_true',
                    help='one run of a 4 x 16-token load (what CI runs: the same steps and checks)')
    args = ap.parse_args()
    if args.quick:
        args.runs, args.requests, args.max_tokens = 1, 4, 16
    with open(os.path.join(REPO, 'data', 'golden_set.yml')) as fh:
        prompts = analysis.select(yaml.safe_load(fh)['prompts'], ['text', 'image', 'audio'])
    tmp = tempfile.mkdtemp(prefix='bench-analysis.')
    hub(os.path.join(tmp, 'hub'))
    proc, url = start(tmp)
    try:
        client = vllm_analysis.Client(url, None, 120)
        g_s, l_s, tokens = [], [], []
        for _run in range(args.runs):
            secs, tokens, ok = golden(client, prompts)
            if not ok:
                raise SystemExit('a golden prompt failed on the healthy stand-in')
            g_s.append(secs)
            perf = vllm_analysis.run_load(client, MODEL, args.requests, args.max_tokens)
            if perf.get('errors'):
                raise SystemExit('the load failed on the healthy stand-in: %s' % perf)
            l_s.append(perf['wall_s'])
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    g, load = statistics.median(g_s), statistics.median(l_s)
    ttft, per_tok = float(os.environ.get('STANDIN_TTFT_S', '0.05')), float(os.environ.get('STANDIN_TOKEN_S', '0.02'))
    print('canary analysis, lab stand-in (TTFT %.2f s, %.0f tokens/s per stream), median of %d runs'
          % (ttft, 1 / per_tok, args.runs))
    print('  golden set: %d prompts, %d answer tokens in all (%s)' % (len(prompts), sum(tokens), tokens))
    print('  golden set, one pass          %6.2f s' % g)
    print('  load %2d x %3d tokens, one pass %6.2f s' % (args.requests, args.max_tokens, load))
    print('  canary (old + new, each golden + load)  %6.2f s' % (2 * (g + load)))
    print('  later host (new, golden only)           %6.2f s' % g)
    print('model for a real host: golden = sum(TTFT + tokens / tps), load = TTFT + max_tokens / load tps')
    print('  %-10s %-12s %-8s %10s %10s %12s %12s' % ('tps', 'load tps', 'TTFT', 'golden', 'load', 'canary',
                                                      'later host'))
    for tps, ltps, t in zip(args.real_tps, args.real_load_tps, args.real_ttft):
        mg = sum(t + n / tps for n in tokens)
        ml = t + args.max_tokens / ltps
        print('  %-10.0f %-12.0f %-8.2f %9.1fs %9.1fs %11.1fs %11.1fs' % (tps, ltps, t, mg, ml, 2 * (mg + ml), mg))
    lab_model = sum(ttft + max(n - 1, 0) * per_tok for n in tokens)
    print('  (the same model with the lab\'s pacing: golden %.2f s, load %.2f s; measured %.2f s and %.2f s)'
          % (lab_model, ttft + (args.max_tokens - 1) * per_tok, g, load))


if __name__ == '__main__':
    main()
