"""The controller's cost of a rollout at fleet scale (issue 34), measured with the real playbook.

Runs deploy-inkling.yml (playbooks/deploy_inkling.yml) with every play, action plugin, filter and the journal
(plugins/action/rollout_journal.py) exactly as a fleet runs them, against N simulated H200 hosts: only the host
side is simulated. The bench-only connection plugin bench/scale/connection_plugins/inkling_replay.py answers each
module run from bench/scale/scale_responders.py (a host that serves, gates that pass at once); the bench-only
callback bench/scale/callback_plugins/inkling_scale.py records every task result per host and times every
journal call. bench/scale/README.md says what is simulated and how.

For each fleet size N (--hosts, default 16,64,256,1024), from hosts that serve release A:
  1. an upgrade to release B (a variant override adds one environment entry: the unit changes on every host,
     so every host drains, restarts, passes its gates and is recorded `done`), in a fresh report directory;
  2. a no-op re-run of release B against the state the upgrade left on the simulated hosts and the journal it
     left in the report directory (`changed=0`, every host `unchanged`).
Release A itself comes from a first deploy of two simulated hosts (the canary's and a later host's state are
copied to every host of every size).

Per run: the controller's wall time, its CPU time (user + sys of the ansible-playbook process tree, from
getrusage(RUSAGE_CHILDREN) around it) less the simulation's own CPU (measured in the connection plugin), that
CPU per host, the journal's milliseconds per call under its lock (mean, p95), the tasks per host (play recap).
Then the growth of per-host CPU from 64 to 1,024 hosts, and a real 1,024-host rollout modelled from the figures
(bench/scale/scale_model.py). Figures at sizes not measured are extrapolated per host (or per journal call) on a
line in the fleet size through the two largest sizes measured. Sizes above 64 run only when they fit in
--budget-s; the targets of issue 34 are printed, not asserted. Exit status 1 when a playbook fails, the upgrade
does not end `completed` with every host `done`, or the no-op re-run changes a host.

Usage: .venv/bin/python bench/rollout_scale.py [--hosts 16,64,256,1024] [--forks N] [--budget-s 1800]
           [--max-hosts N] [--timeout-s S] [--json PATH] [--keep] [--quick]
       .venv/bin/python bench/rollout_scale.py --report PATH    (the table and targets of a saved --json again)
"""
import argparse
import configparser
import datetime
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCALE = os.path.join(HERE, 'scale')
sys.path.insert(0, SCALE)
import scale_model  # noqa: E402

REPO_ID = 'thinkingmachines/Inkling-NVFP4'
# the lab registry's stand-in image (inventory/lab/group_vars/all/lab.yml), at a digest of the benchmark's own
STANDIN_IMAGE = 'lab-registry:5000/inkling/vllm-standin'
STANDIN_DIGEST = 'sha256:' + '5ca1e0be' * 8
HOST_TOKEN = '@@SIM_HOST@@'
ALWAYS_RUN = 64          # sizes up to this run whatever the budget
TARGET_GROWTH = 1.25
TARGET_JOURNAL_MS = 5.0
TARGET_NOOP_CPU_PER_HOST = 2.0


def host_names(count):
    return ['sim-h200-%04d' % i for i in range(1, count + 1)]


def ansible_cfg_forks():
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(os.path.join(REPO, 'ansible.cfg'))
    return cfg.getint('defaults', 'forks', fallback=5)


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def percentile(values, pct):
    values = sorted(values)
    if not values:
        return None
    index = max(0, min(len(values) - 1, int(round(pct / 100.0 * len(values) + 0.5)) - 1))
    return values[index]


# ---------------------------------------------------------------- set-up

class Bench(object):
    def __init__(self, args):
        self.args = args
        self.work = args.work or tempfile.mkdtemp(prefix='inkling-scale-')
        self.state_dir = os.path.join(self.work, 'state')
        self.hub = None
        self.hub_url = None
        self.revision = None
        self.size_bytes = None
        self.templates = None
        self.fixtures = None
        self.started = time.time()
        self.forks = args.forks or ansible_cfg_forks()
        self.playbook = shutil.which('ansible-playbook', path=os.path.dirname(sys.executable)) or 'ansible-playbook'
        for sub in ('hosts', 'cache'):
            os.makedirs(os.path.join(self.state_dir, sub), exist_ok=True)

    def start_hub(self):
        root = os.path.join(self.work, 'hub')
        subprocess.run([sys.executable, os.path.join(REPO, 'lab', 'hub', 'make-model.py'), '--root', root],
                       check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(root, 'revisions.json')) as handle:
            info = json.load(handle)[REPO_ID]
        self.revision, self.size_bytes = info['commit'], info['total_bytes']
        port = self.args.hub_port or free_port()
        log = open(os.path.join(self.work, 'hub.log'), 'w')
        self.hub = subprocess.Popen([sys.executable, os.path.join(REPO, 'lab', 'hub', 'fake_hub.py'), '--root', root,
                                     '--host', '127.0.0.1', '--port', str(port)], stdout=log, stderr=subprocess.STDOUT)
        self.hub_url = 'http://127.0.0.1:%d' % port
        for dummy in range(100):
            try:
                with urllib.request.urlopen(self.hub_url + '/_fake/health', timeout=2) as resp:
                    if json.loads(resp.read()).get('ok'):
                        return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError('the fake hub did not answer on %s (%s)' % (self.hub_url, os.path.join(self.work, 'hub.log')))

    def stop_hub(self):
        if self.hub and self.hub.poll() is None:
            self.hub.terminate()
            self.hub.wait(10)

    def write_fixtures(self):
        import scale_fixtures  # pylint: disable=import-outside-toplevel
        self.fixtures = scale_fixtures.build(self.hub_url, REPO_ID, self.revision)
        with open(os.path.join(self.state_dir, 'fixtures.json'), 'w') as handle:
            json.dump(self.fixtures, handle)
        for release in ('a', 'b'):
            with open(os.path.join(self.work, 'release-%s.yml' % release), 'w') as handle:
                handle.write('# release %s of the benchmark: one environment entry of the H200 variant\n'
                             'inkling_variant_overrides_bench:\n  sm90-patched:\n    env:\n'
                             '      INKLING_BENCH_RELEASE: "%s"\n' % (release.upper(), release))

    def write_inventory(self, directory, hosts):
        """The lab's inventory (group_vars of inventory/lab) for N simulated hosts in gpu_h200."""
        lab = os.path.join(REPO, 'inventory', 'lab', 'group_vars')
        os.makedirs(os.path.join(directory, 'group_vars', 'all'), exist_ok=True)
        shutil.copy(os.path.join(lab, 'all', 'lab.yml'), os.path.join(directory, 'group_vars', 'all', 'lab.yml'))
        shutil.copy(os.path.join(lab, 'gpu_h200.yml'), os.path.join(directory, 'group_vars', 'gpu_h200.yml'))
        with open(os.path.join(directory, 'group_vars', 'all', 'generated.yml'), 'w') as handle:
            handle.write('# what lab/lab.sh up would write, for the benchmark\'s own hub and image\n'
                         'lab_generated_model_repo_id: %s\nlab_generated_model_revision: "%s"\n'
                         'lab_generated_model_size_bytes: %d\nlab_generated_model_repos: [%s]\n'
                         'lab_generated_standin_image: %s\nlab_generated_standin_digest_lab: "%s"\n'
                         'lab_generated_wheelhouse: ""\n'
                         % (REPO_ID, self.revision, self.size_bytes, REPO_ID, STANDIN_IMAGE, STANDIN_DIGEST))
        with open(os.path.join(directory, 'group_vars', 'inkling_fleet.yml'), 'w') as handle:
            handle.write('# inventory/lab/group_vars/inkling_fleet.yml with the simulated connection instead of SSH\n'
                         'ansible_connection: inkling_replay\ninkling_scale_state: %s\nansible_pipelining: true\n'
                         'ansible_user: inkling-ops\nansible_become: true\nansible_python_interpreter: /usr/bin/python3\n'
                         '# the benchmark\'s fake hub (lab/hub), for the hosts and for the controller\n'
                         'hf_cache_endpoint: %s\nhf_cache_peer_files_endpoint: %s\n'
                         % (self.state_dir, self.hub_url, self.hub_url))
        with open(os.path.join(directory, 'hosts.yml'), 'w') as handle:
            handle.write('inkling_fleet:\n  children:\n    gpu_h200:\n      hosts:\n')
            handle.writelines('        %s:\n' % name for name in hosts)
        return os.path.join(directory, 'hosts.yml')

    # ------------------------------------------------------------ simulated hosts

    def seed(self, hosts, states):
        """Every host's state: states(index) gives the template (HOST_TOKEN for the host's name)."""
        folder = os.path.join(self.state_dir, 'hosts')
        shutil.rmtree(folder)
        os.makedirs(folder)
        for index, name in enumerate(hosts):
            with open(os.path.join(folder, name + '.json'), 'w') as handle:
                handle.write(states(index).replace(HOST_TOKEN, name))

    def host_state(self, name):
        with open(os.path.join(self.state_dir, 'hosts', name + '.json')) as handle:
            return handle.read().replace(name, HOST_TOKEN)

    def warm_up(self):
        """Release A on two simulated hosts, by a first deploy from hosts that staging prepared: the canary's state
        and a later host's are the templates of every size."""
        import scale_fixtures  # pylint: disable=import-outside-toplevel
        hosts = host_names(2)
        staged = json.dumps(scale_fixtures.staged_host(self.fixtures, ['%s@%s' % (STANDIN_IMAGE, STANDIN_DIGEST)]))
        self.seed(hosts, lambda index: staged)
        run_dir = os.path.join(self.work, 'warm-up')
        inventory = self.write_inventory(run_dir, hosts)
        run = self.run_playbook('warm-up', run_dir, inventory, 'a', len(hosts), timeout=self.args.timeout_s)
        journal = read_journal(run_dir)
        problems = run['problems'] + check_journal(journal, hosts, 'done', 'completed')
        if run['rc'] != 0 or problems:
            raise RuntimeError('the first deploy of release A failed (rc %s%s): %s; log %s'
                               % (run['rc'], ', stopped by --timeout-s' if run['timed_out'] else '',
                                  '; '.join(problems[:5]), run['log']))
        self.templates = [self.host_state(hosts[0]), self.host_state(hosts[1])]
        return run

    # ------------------------------------------------------------ one playbook run

    def run_playbook(self, label, run_dir, inventory, release, count, timeout=None):
        os.makedirs(run_dir, exist_ok=True)
        for name in ('sim-cpu.log', 'problems.log'):
            path = os.path.join(self.state_dir, name)
            if os.path.exists(path):
                os.unlink(path)
        timings = os.path.join(run_dir, label + '-timings.json')
        journal_log = os.path.join(run_dir, label + '-journal-calls.tsv')
        env = dict(os.environ,
                   ANSIBLE_CONNECTION_PLUGINS=os.path.join(SCALE, 'connection_plugins'),
                   ANSIBLE_CALLBACK_PLUGINS=os.path.join(SCALE, 'callback_plugins'),
                   ANSIBLE_CALLBACKS_ENABLED='inkling_scale',
                   INKLING_SCALE_STATE=self.state_dir, INKLING_SCALE_TIMINGS=timings,
                   INKLING_SCALE_JOURNAL_LOG=journal_log,
                   XDG_STATE_HOME=os.path.join(run_dir, 'xdg'))
        env['PATH'] = os.path.dirname(sys.executable) + os.pathsep + env.get('PATH', '')
        argv = [self.playbook, '-i', inventory, 'deploy-inkling.yml',
                '-e', '@' + os.path.join(self.work, 'release-%s.yml' % release)]
        if self.args.forks:
            argv += ['-f', str(self.args.forks)]
        log = os.path.join(run_dir, label + '.log')
        load_before = os.getloadavg()[0]
        cpu0, wall0 = children_cpu(), time.time()
        timed_out = False
        with open(log, 'w') as out:
            proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    rc = proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    rc = proc.wait()
            except BaseException:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise
        wall, cpu = time.time() - wall0, children_cpu() - cpu0
        sim_log = os.path.join(run_dir, label + '-sim-cpu.tsv')
        if os.path.exists(os.path.join(self.state_dir, 'sim-cpu.log')):
            shutil.move(os.path.join(self.state_dir, 'sim-cpu.log'), sim_log)
        problems = []
        if os.path.exists(os.path.join(self.state_dir, 'problems.log')):
            with open(os.path.join(self.state_dir, 'problems.log')) as handle:
                problems = ['simulation: ' + line.strip() for line in handle if line.strip()][:20]
        sim_rows = read_tsv(sim_log)
        return {'label': label, 'hosts': count, 'rc': rc, 'timed_out': timed_out, 'wall_s': round(wall, 2),
                'cpu_s': round(cpu, 2), 'sim_cpu_s': round(sum(float(r[2]) for r in sim_rows), 2),
                'round_trips': len(sim_rows), 'load_avg': [round(load_before, 2), round(os.getloadavg()[0], 2)],
                'log': log, 'timings': read_json(timings), 'journal_calls': read_tsv(journal_log), 'problems': problems}

    # ------------------------------------------------------------ one fleet size

    def measure(self, count):
        hosts = host_names(count)
        run_dir = os.path.join(self.work, 'n%04d' % count)
        inventory = self.write_inventory(run_dir, hosts)
        self.seed(hosts, lambda index: self.templates[min(index, 1)])
        results = []
        for label in ('upgrade', 'noop'):
            timeout = self.args.timeout_s
            if count > ALWAYS_RUN and timeout is None:
                timeout = max(300.0, self.args.budget_s - (time.time() - self.started))
            run = self.run_playbook(label, run_dir, inventory, 'b', count, timeout=timeout)
            journal = read_journal(run_dir)
            if label == 'upgrade':
                problems = check_journal(journal, hosts, 'done', 'completed')
            else:
                problems = check_journal(journal, hosts, 'unchanged', 'completed')
                recap = (run['timings'] or {}).get('recap', {})
                changed = sorted(h for h, s in recap.items() if s.get('changed'))
                if changed:
                    problems.append('the no-op re-run changed %d host(s): %s' % (len(changed), ', '.join(changed[:5])))
            if run['timed_out']:
                problems.insert(0, 'stopped after %.0f s (--timeout-s or the budget)' % run['wall_s'])
            elif run['rc'] != 0:
                problems.insert(0, 'ansible-playbook rc %s (%s)' % (run['rc'], run['log']))
            run['problems'] = run['problems'] + problems
            results.append(summarise(run, journal))
            if run['problems']:
                break
        return results


# ---------------------------------------------------------------- reading the results

def read_json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return None


def read_tsv(path):
    try:
        with open(path) as handle:
            return [line.rstrip('\n').split('\t') for line in handle if line.strip()]
    except (IOError, OSError):
        return []


def read_journal(run_dir):
    return read_json(os.path.join(run_dir, 'xdg', 'inkling-fleet', 'reports', 'journal.json'))


def check_journal(journal, hosts, phase, status):
    if not journal:
        return ['no journal written']
    problems = []
    if journal.get('status') != status:
        problems.append('the journal ends %s, not %s (%s)' % (journal.get('status'), status,
                                                              journal.get('halt_reason') or ''))
    phases = dict((h, (journal.get('hosts') or {}).get(h, {}).get('phase')) for h in hosts)
    wrong = sorted(h for h, p in phases.items() if p != phase)
    if wrong:
        problems.append('%d host(s) not %s in the journal: %s' % (
            len(wrong), phase, ', '.join('%s %s' % (h, phases[h]) for h in wrong[:5])))
    return problems


def summarise(run, journal):
    count = run['hosts']
    controller = max(0.0, run['cpu_s'] - run['sim_cpu_s'])
    calls = run['journal_calls']
    locked = [float(c[4]) * 1000 for c in calls]
    whole = [float(c[3]) * 1000 for c in calls]
    locked_cpu = [float(c[6]) * 1000 for c in calls if len(c) > 6]
    timings = run['timings'] or {}
    recap = timings.get('recap') or {}
    tasks = [s.get('ok', 0) + s.get('skipped', 0) + s.get('failures', 0) + s.get('unreachable', 0)
             for s in recap.values()]
    statuses = {}
    for row in timings.get('results') or []:
        statuses[row[3]] = statuses.get(row[3], 0) + 1
    out = dict((k, run[k]) for k in ('label', 'hosts', 'rc', 'timed_out', 'wall_s', 'cpu_s', 'sim_cpu_s', 'load_avg',
                                     'log', 'problems'))
    out.update({
        'controller_cpu_s': round(controller, 2),
        'cpu_per_host_s': round(controller / count, 3),
        'wall_per_host_s': round(run['wall_s'] / count, 3),
        'journal_calls': len(calls),
        'journal_ms_mean': round(statistics.mean(locked), 2) if locked else None,
        'journal_ms_p95': round(percentile(locked, 95), 2) if locked else None,
        'journal_cpu_ms_mean': round(statistics.mean(locked_cpu), 2) if locked_cpu else None,
        'journal_cpu_ms_p95': round(percentile(locked_cpu, 95), 2) if locked_cpu else None,
        'journal_call_ms_mean': round(statistics.mean(whole), 2) if whole else None,
        'journal_call_ms_p95': round(percentile(whole, 95), 2) if whole else None,
        'journal_s_total': round(sum(locked) / 1000.0, 2),
        'journal_bytes': int(calls[-1][5]) if calls else None,
        'journal_timed_in_worker': bool(timings.get('journal_wrapped')),
        'tasks_per_host': round(statistics.mean(tasks), 1) if tasks else None,
        'tasks_per_host_min_max': [min(tasks), max(tasks)] if tasks else None,
        'results': statuses,
        'includes_per_host': round(timings.get('includes', 0) / float(count), 1),
        'round_trips_per_host': round(run['round_trips'] / float(count), 1),
        'changed_hosts': sum(1 for s in recap.values() if s.get('changed')),
        'journal_status': (journal or {}).get('status'),
    })
    return out


# ---------------------------------------------------------------- figures and targets

def figure_at(measured, label, key, count):
    """(value, how) of a per-host or per-call figure at ``count`` hosts: measured, or extrapolated on the line
    through the two largest sizes measured (scale_model.affine_fit)."""
    points = [(r['hosts'], r[key]) for r in measured if r['label'] == label and not r['problems'] and r.get(key)]
    exact = [v for n, v in points if n == count]
    if exact:
        return exact[0], 'measured'
    if len(set(n for n, v in points)) < 2:
        return None, 'not measured (extrapolation needs two sizes)'
    slope = scale_model.affine_fit(points)[1]
    used = sorted(set(n for n, v in points))[-2:]
    return scale_model.extrapolate(points, count), 'extrapolated from %s hosts, a line in the fleet size (%+.3g per host)' % (
        ' and '.join(str(n) for n in used), slope)


def targets(measured, largest=1024):
    out = []

    def verdict(ok):
        return 'PASS' if ok else 'FAIL'

    for label in ('upgrade', 'noop'):
        at_64, how_64 = figure_at(measured, label, 'cpu_per_host_s', 64)
        at_big, how_big = figure_at(measured, label, 'cpu_per_host_s', largest)
        if at_64 and at_big:
            ratio = at_big / at_64
            out.append({'target': 'per-host controller CPU at %d <= %.2f x at 64 (%s)' % (largest, TARGET_GROWTH, label),
                        'value': '%.3f s / %.3f s = %.2f x' % (at_big, at_64, ratio),
                        'how': '%d: %s; 64: %s' % (largest, how_big, how_64),
                        'ok': ratio <= TARGET_GROWTH, 'verdict': verdict(ratio <= TARGET_GROWTH), 'ratio': round(ratio, 3)})
    for label in ('upgrade', 'noop'):
        # judged on the CPU under the lock: on a loaded machine its wall time is mostly waiting for a core
        value, how = figure_at(measured, label, 'journal_cpu_ms_mean', largest)
        if value is not None:
            wall, dummy = figure_at(measured, label, 'journal_ms_mean', largest)
            out.append({'target': 'journal <= %.0f ms per call at %d hosts (%s, CPU under its lock)' % (TARGET_JOURNAL_MS, largest, label),
                        'value': '%.1f ms (wall %.1f ms)' % (value, wall or 0), 'how': how, 'ok': value <= TARGET_JOURNAL_MS,
                        'verdict': verdict(value <= TARGET_JOURNAL_MS)})
    value, how = figure_at(measured, 'noop', 'cpu_per_host_s', largest)
    if value is not None:
        out.append({'target': 'no-op re-run <= %.0f CPU-s per host at %d hosts' % (TARGET_NOOP_CPU_PER_HOST, largest),
                    'value': '%.2f CPU-s' % value, 'how': how, 'ok': value <= TARGET_NOOP_CPU_PER_HOST,
                    'verdict': verdict(value <= TARGET_NOOP_CPU_PER_HOST)})
    wall, how = figure_at(measured, 'upgrade', 'wall_per_host_s', largest)
    model = None
    if wall is not None:
        model = scale_model.rollout_model(largest, wall * largest)
        out.append({'target': 'a real %d-host rollout within %d %% of gates plus staging transfer (model)'
                              % (largest, round(scale_model.TARGET_OVERHEAD * 100)),
                    'value': '%.0f s = %.0f s gates (%d batches x %.0f s) + %.0f s transfer + %.0f s controller: %.2f x'
                             % (model['total_s'], model['gates_s'], len(model['batches']), scale_model.GATE_S,
                                model['transfer_s'], model['controller_s'], model['ratio']),
                    'how': 'controller time: the upgrade\'s wall time, ' + how, 'ok': model['ok'],
                    'verdict': verdict(model['ok'])})
    cpu, how = figure_at(measured, 'upgrade', 'cpu_per_host_s', largest)
    if cpu is not None:
        # the same with the controller's CPU spread over this machine's cores: what an idle machine could do at best
        bound = scale_model.rollout_model(largest, cpu * largest / float(os.cpu_count() or 1))
        out.append({'target': 'the same model, controller time = its CPU / %d cores (a lower bound)' % (os.cpu_count() or 1),
                    'value': '%.0f s: %.2f x' % (bound['total_s'], bound['ratio']), 'how': how, 'ok': bound['ok'],
                    'verdict': verdict(bound['ok'])})
    return out, model


def table(measured, skipped):
    lines = ['| hosts | run | wall (s) | controller CPU (s) | CPU per host (s) | tasks per host | journal calls '
             '| journal ms per call under its lock: CPU mean / p95 (wall mean) | changed hosts | load |',
             '| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |']
    for r in measured:
        run = {'upgrade': 'upgrade', 'noop': 'no-op re-run'}[r['label']]
        if r['problems']:
            run += ' (FAILED: %s)' % r['problems'][0]
        lines.append('| %s | %s | %.1f | %.1f | %.2f | %s | %d | %s / %s (%s) | %d | %.1f |' % (
            '{:,}'.format(r['hosts']), run, r['wall_s'], r['controller_cpu_s'], r['cpu_per_host_s'], r['tasks_per_host'],
            r['journal_calls'], r['journal_cpu_ms_mean'], r['journal_cpu_ms_p95'], r['journal_ms_mean'], r['changed_hosts'],
            max(r['load_avg'])))
    for count, why in skipped:
        lines.append('| %s | %s | | | | | | | | |' % ('{:,}'.format(count), why))
    return '\n'.join(lines)


# ---------------------------------------------------------------- main

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument('--hosts', default='16,64,256,1024', help='fleet sizes, comma-separated (default 16,64,256,1024)')
    ap.add_argument('--forks', type=int, default=0, help='ansible-playbook --forks (default: ansible.cfg\'s)')
    ap.add_argument('--budget-s', type=float, default=1800.0,
                    help='sizes above %d run only when the whole benchmark stays within this (default 1800)' % ALWAYS_RUN)
    ap.add_argument('--max-hosts', type=int, default=0, help='skip sizes above this')
    ap.add_argument('--timeout-s', type=float, default=None, help='stop any one playbook run after this long')
    ap.add_argument('--json', help='write the figures to this file')
    ap.add_argument('--hub-port', type=int, default=0, help='port of the fake hub (default: a free one)')
    ap.add_argument('--work', help='working directory (default: a new temporary one)')
    ap.add_argument('--keep', action='store_true', help='keep the working directory (logs, journals, host states)')
    ap.add_argument('--quick', action='store_true', help='4 hosts only, both runs (scripts/bench-quick.sh, CI)')
    ap.add_argument('--report', metavar='JSON', help='print the table and the targets of a run saved with --json, run nothing')
    args = ap.parse_args(argv)
    sizes = [4] if args.quick else sorted(set(int(n) for n in args.hosts.split(',') if n.strip()))
    args.sizes = sizes
    return args


def predict_wall(measured, count):
    """Seconds both runs of ``count`` hosts would take: their wall time per host on a line in the fleet size."""
    points = [(n, sum(r['wall_s'] for r in measured if r['hosts'] == n) / float(n))
              for n in sorted(set(r['hosts'] for r in measured))
              if all(not r['problems'] for r in measured if r['hosts'] == n)]
    return scale_model.extrapolate(points, count) * count if points else None


def report(measured, skipped, ok):
    checks, model = targets(measured)
    print()
    print(table(measured, skipped))
    print()
    for check in checks:
        print('target: %s: %s (%s) %s' % (check['target'], check['value'], check['how'], check['verdict']))
    print('correctness: %s' % ('every upgrade ended completed with every host done, every no-op re-run changed nothing'
                               if ok else 'FAILED (see above)'))
    return checks, model


def main(argv=None):
    args = parse_args(argv)
    if args.report:
        with open(args.report) as handle:
            saved = json.load(handle)
        skipped = [(r['hosts'], r['why'] if 'would take' not in r['why'] else
                    'not run (would take about %.0f s, extrapolated)' % predict_wall(saved['runs'], r['hosts']))
                   for r in saved['not_run']]
        report(saved['runs'], skipped, saved['correct'])
        return 0 if saved['correct'] else 1
    bench = Bench(args)
    measured, skipped, ok = [], [], True
    print('rollout scale benchmark, %s, %d cores, forks %d, work %s' % (
        datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'), os.cpu_count(), bench.forks,
        bench.work), flush=True)
    try:
        bench.start_hub()
        bench.write_fixtures()
        warm = bench.warm_up()
        print('release A deployed on 2 simulated hosts (the templates of every size): %.1f s' % warm['wall_s'], flush=True)
        for count in args.sizes:
            if args.max_hosts and count > args.max_hosts:
                skipped.append((count, 'not run (above --max-hosts %d)' % args.max_hosts))
                continue
            elapsed = time.time() - bench.started
            predicted = predict_wall(measured, count)
            if count > ALWAYS_RUN and predicted is not None:
                if elapsed + predicted > args.budget_s:
                    skipped.append((count, 'not run (would take about %.0f s, extrapolated)' % predicted))
                    print('%d hosts: not run (would take about %.0f s, extrapolated; budget %.0f s, %.0f s spent)'
                          % (count, predicted, args.budget_s, elapsed), flush=True)
                    continue
            for result in bench.measure(count):
                measured.append(result)
                print('%5d hosts %-8s wall %7.1f s, controller CPU %7.1f s (%.2f s per host, simulation %.1f s), journal '
                      '%s ms CPU per call under its lock (p95 %s, wall %s) over %d calls, %s tasks per host, %d changed host(s)%s' % (
                          count, result['label'], result['wall_s'], result['controller_cpu_s'], result['cpu_per_host_s'],
                          result['sim_cpu_s'], result['journal_cpu_ms_mean'], result['journal_cpu_ms_p95'],
                          result['journal_ms_mean'], result['journal_calls'], result['tasks_per_host'],
                          result['changed_hosts'],
                          ''.join('\n      PROBLEM: %s' % p for p in result['problems'])), flush=True)
                ok = ok and not result['problems']
            if not ok:
                break
    except RuntimeError as exc:
        print('FAILED: %s' % exc, flush=True)
        ok = False
    finally:
        bench.stop_hub()
    checks, model = report(measured, skipped, ok)
    if args.json:
        with open(args.json, 'w') as handle:
            json.dump({'date': datetime.datetime.now(datetime.timezone.utc).isoformat(), 'cores': os.cpu_count(),
                       'forks': bench.forks, 'sizes': args.sizes, 'quick': args.quick, 'runs': measured,
                       'not_run': [{'hosts': n, 'why': why} for n, why in skipped], 'targets': checks, 'model': model,
                       'correct': ok}, handle, indent=1)
    if args.keep or not ok:
        print('kept: %s' % bench.work)
    else:
        shutil.rmtree(bench.work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
