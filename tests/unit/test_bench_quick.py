# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Every benchmark has a quick mode and scripts/bench-quick.sh (run by CI) runs it: a benchmark
nothing runs rots (issue 39, item 12)."""

import glob
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _benchmarks():
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, 'bench', '*.py')))


def _script():
    with open(os.path.join(REPO, 'scripts', 'bench-quick.sh')) as f:
        return f.read()


def test_there_are_benchmarks():
    assert len(_benchmarks()) >= 5


def test_every_benchmark_takes_quick():
    for name in _benchmarks():
        out = subprocess.run([sys.executable, os.path.join(REPO, 'bench', name), '--help'], cwd=REPO,
                             capture_output=True, text=True, check=True, timeout=60).stdout
        assert '--quick' in out, name


def test_bench_quick_runs_every_benchmark():
    runs = re.findall(r'^\s*bench \S+ python bench/(\S+\.py)', _script(), flags=re.M)
    assert sorted(set(runs)) == _benchmarks()


def test_bench_quick_runs_the_quick_modes():
    for line in re.findall(r'^\s*bench \S+ python bench/\S+\.py.*$', _script(), flags=re.M):
        # connections.py: --runs 1 instead of --quick, which would skip the first deploy
        assert '--quick' in line or ('connections.py' in line and '--runs 1' in line), line


def _test_sh():
    with open(os.path.join(REPO, 'scripts', 'test.sh')) as f:
        return f.read()


def test_ci_runs_bench_quick():
    m = re.search(r'^\s*step bench-quick bash scripts/bench-quick\.sh(.*)$', _test_sh(), flags=re.M)
    assert m
    ci = m.group(1).split()
    # the benchmarks that need no lab fleet; an empty list would run all of them
    assert ci and set(ci) <= set(re.findall(r'^\s*bench (\S+) python', _script(), flags=re.M))
    for name in ('reverify', 'canary', 'journal'):
        assert name in ci


def test_ci_runs_every_benchmark():
    """The lab benchmarks run in molecule's second lane (or after the scenarios with one lane):
    between them, the two CI steps name every benchmark bench-quick.sh knows."""
    text = _test_sh()
    first = re.search(r'^\s*step bench-quick bash scripts/bench-quick\.sh(.*)$', text, flags=re.M).group(1).split()
    lab = re.search(r'^lab_bench\(\) \{ bash scripts/bench-quick\.sh ([^;]*);', text, flags=re.M)
    assert lab, 'scripts/test.sh defines no lab_bench'
    # fanout (its own hub and hosts) and scale (simulated hosts, heavy on the controller's CPU) run
    # in the second lane too, off the first lane's path
    assert set(lab.group(1).split()) == {'fanout', 'scale', 'connections', 'unavailability'}
    assert set(first) | set(lab.group(1).split()) == set(re.findall(r'^\s*bench (\S+) python', _script(), flags=re.M))
    # called in the second lane and, with one lane, as a step of its own
    assert re.search(r'^\s+lab_bench \|\| rc=\$\?$', text, flags=re.M)
    assert re.search(r'^\[ -n "\$lane_pid" \] \|\| step bench-quick-lab lab_bench$', text, flags=re.M)
    assert 'bench-quick-lab $rc' in text
