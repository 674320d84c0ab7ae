# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The stand-in's compile cost (STANDIN_COMPILE_DELAY_S): a cold start pays it and writes an entry
under its compile key; a start that finds a valid entry for its key skips it; a cache copied to
a host with another driver or GPU count misses (docs/warm-restarts.md)."""

import shutil
import time

from test_standin import Server, hub  # noqa: F401 (hub is a fixture)  # pylint: disable=unused-import


def gpu_env(tmp_path, name, gpus=8, driver='580.159.04', delay='1.5'):
    dev = tmp_path / name / 'dev'
    lib = tmp_path / name / 'lib'
    dev.mkdir(parents=True)
    lib.mkdir(parents=True)
    for i in range(gpus):
        (dev / ('nvidia%d' % i)).write_text('')
    (dev / 'nvidiactl').write_text('')
    (lib / ('libcuda.so.' + driver)).write_text('')
    return {'STANDIN_COMPILE_DELAY_S': delay, 'STANDIN_DEV_DIR': str(dev), 'STANDIN_DRIVER_LIBDIRS': str(lib),
            'VLLM_CACHE_ROOT': str(tmp_path / name / 'vllm-cache')}


def start(hub_dir, tmp_path, env):
    s = Server(hub_dir, tmp_path, args=['--tensor-parallel-size', '8'], env=env)
    t0 = time.time()
    assert s.wait_open()
    return s, time.time() - t0


def metrics(s):
    return s.get('/metrics')[1]


def test_cold_start_pays_the_delay_then_hits(hub, tmp_path):  # noqa: F811
    env = gpu_env(tmp_path, 'h200-01')
    s, secs = start(hub, tmp_path, env)
    assert secs >= 1.4
    assert 'standin_compile_cache_hit 0' in metrics(s)
    rc, err = s.stop()
    assert 'compile cache miss: key' in err and '"driver": "580.159.04"' in err and '"gpus": 8' in err
    entries = list((tmp_path / 'h200-01' / 'vllm-cache' / 'torch_compile_cache' / 'standin').glob('*/entry.json'))
    assert len(entries) == 1
    s, secs = start(hub, tmp_path, env)
    assert secs < 1.4
    assert 'standin_compile_cache_hit 1' in metrics(s)
    rc, err = s.stop()
    assert 'compile cache hit: key' in err


def test_copied_cache_hits_on_an_identical_host_only(hub, tmp_path):  # noqa: F811
    src = gpu_env(tmp_path, 'canary', delay='0')
    s, dummy = start(hub, tmp_path, src)
    s.stop()
    for name, kw, hit in (('same', {}, 1), ('other-driver', {'driver': '580.95.05'}, 0), ('four-gpus', {'gpus': 4}, 0)):
        env = gpu_env(tmp_path, name, delay='0', **kw)
        shutil.copytree(src['VLLM_CACHE_ROOT'], env['VLLM_CACHE_ROOT'])
        s, dummy = start(hub, tmp_path, env)
        assert 'standin_compile_cache_hit %d' % hit in metrics(s), name
        s.stop()


def test_a_damaged_entry_is_a_miss(hub, tmp_path):  # noqa: F811
    env = gpu_env(tmp_path, 'h200-01', delay='0')
    s, dummy = start(hub, tmp_path, env)
    s.stop()
    entry = next((tmp_path / 'h200-01' / 'vllm-cache' / 'torch_compile_cache' / 'standin').glob('*/entry.json'))
    entry.write_text('{"key": "trunc')
    s, dummy = start(hub, tmp_path, env)
    assert 'standin_compile_cache_hit 0' in metrics(s)
    s.stop()


def test_sigterm_during_the_compile_exits_promptly(hub, tmp_path):  # noqa: F811
    s = Server(hub, tmp_path, env=gpu_env(tmp_path, 'h', delay='60'))
    time.sleep(1.0)
    t0 = time.time()
    rc, err = s.stop()
    assert rc == 0 and time.time() - t0 < 5
