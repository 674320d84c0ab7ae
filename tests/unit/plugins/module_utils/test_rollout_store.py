# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The journal's store (plugins/module_utils/rollout_store.py, issue 34): a call of record, step or
admit costs the same whatever the size of the fleet, and the store keeps the journal's guarantees:

* the same decisions: a view (the host's rows and the run-level fields) gives what the whole
  journal gives, the budget's counters are what a scan of every host gives, and the halt reason
  says where the hosts failed exactly as the scan did;
* no lost update with hosts writing in parallel (processes, with and without the action's lock);
* a kill -9 at any point (before any statement of any call, or at a random moment) leaves the
  journal of before or after the call, consistent, and a run that resumes it;
* a journal.json of version 2 (before the store) is imported; a snapshot whose store is gone is
  refused; links and special files are refused; the files are 0600.
"""

import datetime
import json
import os
import random
import shutil
import signal
import sqlite3
import stat
import time
import types

import pytest

from ansible_collections.inkling.fleet.plugins.action import rollout_journal as rj
from ansible_collections.inkling.fleet.plugins.module_utils import rollout as r
from ansible_collections.inkling.fleet.plugins.module_utils import rollout_store as rs
from test_rollout_counters import B_ENTRY, apply_whole, contract, fleet, halt_reason_by_scan, plan

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE_V2 = os.path.join(os.path.dirname(os.path.dirname(HERE)), 'fixtures', 'journal-v2', 'journal.json')
NOW = '2026-12-07T00:00:00Z'
T0 = 1796000000.0


# -- the action, called as Ansible calls it -------------------------------------------------------

class _Task(object):
    action = 'inkling.fleet.rollout_journal'
    async_val = 0
    diff = False
    check_mode = False

    def __init__(self, args):
        self.args = args


class _Connection(object):
    _shell = types.SimpleNamespace(tmpdir=None)


def call(directory, host, action, hostvars=None, **args):
    """ActionModule.run, with the flock and everything, as a worker process runs it."""
    args = dict(args, action=action, report_dir=str(directory), host=host)
    module = rj.ActionModule(_Task(args), _Connection(), None, None, None, None)
    return module.run(task_vars={'inventory_hostname': host, 'hostvars': hostvars or {}})


def hostvars_of(hosts, entry=None):
    return dict((h, {'rollout_deployment': contract(h, entry)}) for h in hosts)


def whole(directory):
    """The store's journal as the engine sees it (counters included), or None."""
    store = rs.Store(str(directory))
    try:
        store.begin_read()
        return store.load_full() if store.exists else None
    finally:
        store.close()


class Frozen(object):
    """A fixed clock and controller for the action (runs compared with each other must agree)."""

    class _Datetime(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.datetime(2026, 12, 7, 0, 0, 0, tzinfo=tz)

    @classmethod
    def apply(cls, monkeypatch):
        monkeypatch.setattr(rj, '_now', lambda: NOW)
        monkeypatch.setattr(rj, 'time', types.SimpleNamespace(time=lambda: T0))
        monkeypatch.setattr(rj, '_controller', lambda: {'host': 'ctl', 'pid': 1, 'pid_start': 1})
        monkeypatch.setattr(rj, 'datetime', types.SimpleNamespace(datetime=cls._Datetime, timezone=datetime.timezone))


# -- the same decisions --------------------------------------------------------------------------

def apply_view(store, op, max_failed):
    """What the action does for one call: a view in a transaction, the decision, the changed rows."""
    kind, host, phase = op
    store.begin()
    view = store.load_view(host)
    if kind == 'admit' and r.halt_needed(view, max_failed) and view['hosts'][host].get('phase') not in r.TERMINAL:
        store.add_failed(view)
    out = apply_whole(view, op, max_failed)
    store.save_view(view)
    store.commit()
    return out


@pytest.mark.parametrize('seed', range(12))
def test_a_view_decides_as_the_whole_journal(tmp_path, seed):
    """The same random calls on the whole journal and through the store's views (the host's rows and the
    run-level row, the failed hosts added when the budget is spent): the same answers, the same journal."""
    rng = random.Random(seed)
    outcomes = fleet(rng, rng.choice([6, 12, 30]))
    max_failed = rng.choice([0, 1, 2, 5, 100])
    journal, _a, _n = r.open_run(None, outcomes, '20261207T000000Z', NOW, max_failed=max_failed)
    store = rs.Store(str(tmp_path))
    store.create()
    store.begin()
    store.replace(journal)
    store.commit()
    for op in plan(rng, outcomes):
        was_halted = journal['halted']
        expected = apply_whole(journal, op, max_failed)
        assert apply_view(store, op, max_failed) == expected, op
        if journal['halted'] and not was_halted:
            assert journal['halt_reason'] == halt_reason_by_scan(journal, max_failed)
    store.close()
    assert whole(tmp_path) == journal


def test_a_replica_counts_once_when_its_members_fail_one_after_the_other(tmp_path):
    info = {'name': 'r1', 'members': ['m1', 'm2'], 'head': 'm1'}
    outcomes = {'m1': {'contract': contract('m1', B_ENTRY, info)}, 'm2': {'contract': contract('m2', B_ENTRY, info)},
                's1': {'contract': contract('s1')}}
    journal, _a, _n = r.open_run(None, outcomes, '20261207T000000Z', NOW, max_failed=1)
    store = rs.Store(str(tmp_path))
    store.create()
    store.begin()
    store.replace(journal)
    store.commit()
    for op in [('record', 'm1', 'staged'), ('record', 'm2', 'staged'), ('record', 'm1', 'draining'),
               ('record', 'm2', 'draining'), ('record', 'm1', 'drain_failed'), ('record', 'm2', 'replica_held'),
               ('admit', 's1', None)]:
        apply_view(store, op, 1)
    store.close()
    counted_ = whole(tmp_path)['counters']
    assert counted_ == {'failed_hosts': 2, 'failed_units': 1, 'replicas': 1,
                        'failed_by_phase': {'drain_failed': 1, 'replica_held': 1}}
    assert not whole(tmp_path)['halted']              # one replica failed: within the budget of 1


# -- O(1) per call -------------------------------------------------------------------------------

def counted(monkeypatch):
    """Count the statements the store runs and the host rows it loads."""
    seen = {'statements': 0}
    original = rs.Store._sql

    def _sql(self, statement, params=()):
        seen['statements'] += 1
        return original(self, statement, params)
    monkeypatch.setattr(rs.Store, '_sql', _sql)
    return seen


def per_call(directory, size, monkeypatch):
    """The statements each of five calls runs, and the host rows each loads, in a fleet of ``size`` hosts."""
    Frozen.apply(monkeypatch)       # one clock: the run-level row changes the same way at every size
    hosts = ['h%04d' % i for i in range(size)]
    assert call(directory, hosts[0], 'open', hostvars_of(hosts), hosts=hosts, max_failed=0).get('failed') is None
    seen, loaded, statements = counted(monkeypatch), [], []
    original = rs.Store._add_hosts

    def _add_hosts(self, view, names):
        loaded.append(len(names))
        return original(self, view, names)
    monkeypatch.setattr(rs.Store, '_add_hosts', _add_hosts)
    for action, extra in (('admit', {}), ('record', {'phase': 'staged'}), ('record', {'phase': 'draining'}),
                          ('record', {'phase': 'restarting'}), ('step', {'step': 'stopped'})):
        before = seen['statements']
        out = call(directory, hosts[size // 2], action, max_failed=0, **extra)
        assert not out.get('failed'), out
        statements.append(seen['statements'] - before)
    monkeypatch.undo()
    return statements, loaded


def test_record_step_and_admit_read_and_write_only_their_host(tmp_path, monkeypatch):
    small = per_call(tmp_path / 'small', 8, monkeypatch)
    large = per_call(tmp_path / 'large', 1024, monkeypatch)
    assert large[1] == [1] * 5                  # each call loads its own host's row, and no other
    assert large == small                       # the same statements at 8 and 1,024 hosts: none walks the fleet


# -- no lost update ------------------------------------------------------------------------------

def fork(target):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            target()
            code = 0
        finally:
            os._exit(code)
    return pid


def walk_through_the_action(directory, hosts):
    for host in hosts:
        for action, extra in (('admit', {}), ('record', {'phase': 'staged'}), ('record', {'phase': 'draining'}),
                              ('record', {'phase': 'restarting'}), ('step', {'step': 'stopped'}),
                              ('record', {'phase': 'rolling_back'}), ('record', {'phase': 'rolled_back'})):
            out = call(directory, host, action, max_failed=1000, **extra)
            assert not out.get('failed') and out.get('admitted', True), out


def walk_through_the_store(directory, hosts):
    """The store alone, without the action's flock: its transactions are the lock."""
    store = rs.Store(str(directory))
    for host in hosts:
        for kind, phase in (('admit', None), ('record', 'staged'), ('record', 'draining'), ('record', 'restarting'),
                            ('record', 'rolling_back'), ('record', 'rolled_back')):
            apply_view(store, (kind, host, phase), 1000)
    store.close()


def slowly(walk, directory, hosts):
    """``walk`` with 2 ms between each call's read and its write: writers that overlap, every time."""
    save_view = rs.Store.save_view

    def slow_save_view(self, view):
        time.sleep(0.002)
        return save_view(self, view)
    rs.Store.save_view = slow_save_view      # in a forked child only
    walk(directory, hosts)


@pytest.mark.parametrize('walk', [walk_through_the_action, walk_through_the_store])
def test_parallel_writers_lose_no_update(tmp_path, walk):
    hosts = ['h%02d' % i for i in range(48)]
    hostvars = dict(hostvars_of(hosts[::2]), **hostvars_of(hosts[1::2], B_ENTRY))
    assert not call(tmp_path, hosts[0], 'open', hostvars, hosts=hosts, max_failed=1000).get('failed')
    pids = [fork(lambda part=part: slowly(walk, tmp_path, hosts[part::8])) for part in range(8)]
    assert [os.waitpid(pid, 0)[1] for pid in pids] == [0] * 8
    journal = whole(tmp_path)
    steps = ['stopped'] if walk is walk_through_the_action else []
    for host, rec in journal['hosts'].items():      # every host's every record
        assert [e['phase'] for e in rec['events']] == ['pending', 'staged', 'draining', 'restarting'] + steps + \
            ['rolling_back', 'rolled_back'], host
    # the run-level row, written by every call, lost none of them: every failure counted, one canary per variant
    assert journal['counters'] == r.budget_counters(journal)
    assert journal['counters']['failed_hosts'] == 48 and journal['counters']['failed_units'] == 48
    assert sorted(journal['canaries']) == ['sm100', 'sm90-patched']
    assert sum(1 for rec in journal['hosts'].values() if rec.get('canary')) == 2


# -- a kill -9 at any point ----------------------------------------------------------------------

SCENARIO = [('open', 'a', {'hosts': ['a', 'b', 'c', 'd'], 'max_failed': 0}),
            ('admit', 'a', {'max_failed': 0}), ('record', 'a', {'phase': 'staged'}),
            ('record', 'a', {'phase': 'draining'}), ('record', 'a', {'phase': 'restarting'}),
            ('step', 'a', {'step': 'stopped'}), ('step', 'a', {'step': 'started'}),
            ('record', 'a', {'phase': 'rolling_back'}), ('record', 'a', {'phase': 'rolled_back'}),
            ('admit', 'b', {'max_failed': 0}), ('admit', 'c', {'max_failed': 0}), ('close', 'a', {})]
HOSTVARS = hostvars_of(['a', 'b', 'c', 'd'])


def run_scenario(directory, progress=None):
    """The scenario's calls; ``progress``: a file descriptor told the index of each call as it begins."""
    for i, (action, host, args) in enumerate(SCENARIO):
        if progress is not None:
            os.write(progress, b'%d\n' % i)
        out = call(directory, host, action, HOSTVARS, **args)
        assert not out.get('failed'), out


def killed_at(point, directory, monkeypatch):
    """Run the scenario in a child process that SIGKILLs itself before its ``point``-th statement or file
    write; the index of the call it was in (None: it ran to its end)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        seen = [0]
        sql, write = rs.Store._sql, rj._write

        def kill_point():
            seen[0] += 1
            if seen[0] == point:
                os.kill(os.getpid(), signal.SIGKILL)

        def _sql(self, statement, params=()):
            kill_point()
            return sql(self, statement, params)

        def _write(path, text):
            kill_point()
            return write(path, text)
        monkeypatch.setattr(rs.Store, '_sql', _sql)
        monkeypatch.setattr(rj, '_write', _write)
        code = 1
        try:
            run_scenario(directory, write_end)
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as f:
        calls = f.read().split()
    _pid, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status):
        assert os.WEXITSTATUS(status) == 0
        return None
    assert os.WTERMSIG(status) == signal.SIGKILL
    return int(calls[-1])


def test_a_kill_at_any_point_leaves_the_journal_of_before_or_after_the_call_and_it_resumes(tmp_path, monkeypatch):
    Frozen.apply(monkeypatch)
    reference = tmp_path / 'reference'
    states = [None]
    for i in range(len(SCENARIO)):
        out = call(reference, SCENARIO[i][1], SCENARIO[i][0], HOSTVARS, **SCENARIO[i][2])
        assert not out.get('failed'), out
        states.append(whole(reference))
    assert states[-1]['status'] == 'halted'
    point, checked = 0, 0
    while True:
        point += 1
        directory = tmp_path / ('killed-%d' % point)
        in_call = killed_at(point, directory, monkeypatch)
        if in_call is None:
            break
        journal = whole(directory) if (directory / rs.DB_NAME).exists() else None
        assert journal in (states[in_call], states[in_call + 1]), (point, SCENARIO[in_call])
        if journal is not None:
            assert sqlite3.connect(str(directory / rs.DB_NAME)).execute('PRAGMA integrity_check').fetchone() == ('ok',)
            assert journal['counters'] == r.budget_counters(journal)
            assert r.check_journal(journal) == []
        if (directory / rs.SNAPSHOT_NAME).exists():     # never a torn snapshot
            assert isinstance(json.loads((directory / rs.SNAPSHOT_NAME).read_text()), dict)
        # the next run resumes what the killed one left (or starts anew once it was closed)
        again = call(directory, 'a', 'open', HOSTVARS, hosts=['a', 'b', 'c', 'd'], max_failed=0)
        assert not again.get('failed'), again
        assert again['resumed'] == bool(journal and journal['status'] == 'running')
        resumed = whole(directory)
        assert resumed['counters'] == r.budget_counters(resumed)
        if journal and journal['status'] == 'running':
            assert resumed['hosts']['a']['events'][:len(journal['hosts']['a']['events'])] == journal['hosts']['a']['events']
        checked += 1
    assert checked > 60      # every statement and file write of the scenario's twelve calls


def test_the_test_kill_hook_fires_once_the_record_is_committed(tmp_path, monkeypatch):
    """INKLING_FLEET_TEST_KILL_AFTER=HOST:NAME kills ansible-playbook when the record is durable: another
    reader (the next run) sees it at the moment of the kill."""
    assert not call(tmp_path, 'a', 'open', HOSTVARS, hosts=['a', 'b'], max_failed=0).get('failed')
    seen = []
    monkeypatch.setattr(rj.os, 'kill', lambda pid, sig: seen.append((sig, whole(tmp_path)['hosts']['a']['phase'])))
    monkeypatch.setenv('INKLING_FLEET_TEST_KILL_AFTER', 'a:staged')
    call(tmp_path, 'a', 'record', phase='staged')
    assert seen == [(signal.SIGKILL, 'staged')] * 2           # ansible-playbook, then the worker


def test_a_kill_at_a_random_moment_loses_no_committed_record(tmp_path):
    hosts = ['h%02d' % i for i in range(16)]
    assert not call(tmp_path, hosts[0], 'open', hostvars_of(hosts), hosts=hosts, max_failed=0).get('failed')
    for host in hosts:
        for phase in ('staged', 'draining', 'restarting'):
            assert not call(tmp_path, host, 'record', phase=phase).get('failed')
    rng = random.Random(34)
    committed = 0
    for attempt in range(12):
        read_end, write_end = os.pipe()

        def steps():
            for i in range(100000):
                call(tmp_path, hosts[i % len(hosts)], 'step', step='stopped')
                os.write(write_end, b'.')
        pid = fork(steps)
        os.close(write_end)
        done = 0
        for _i in range(rng.randint(1, 4)):     # a few calls committed, whatever the machine's load
            done += len(os.read(read_end, 1))
        time.sleep(rng.uniform(0, 0.006))        # then a kill at some moment of the next calls
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        with os.fdopen(read_end) as f:
            done += len(f.read())
        committed += done
        journal = whole(tmp_path)
        steps_recorded = sum(len(rec['restarts'][-1].get('steps', [])) for rec in journal['hosts'].values())
        # every step the child saw committed is there; at most the one it was reporting is more
        assert steps_recorded in (committed, committed + 1), attempt
        committed = steps_recorded
        assert journal['counters'] == r.budget_counters(journal)
    assert committed > 12


# -- journal.json of version 2, snapshots ----------------------------------------------------------

def v2_dir(tmp_path):
    directory = tmp_path / 'reports'
    directory.mkdir(mode=0o700)
    shutil.copy(FIXTURE_V2, str(directory / 'journal.json'))
    return directory


def fixture_hostvars():
    with open(FIXTURE_V2) as f:
        journal = json.load(f)
    hostvars = dict((h, {'rollout_deployment': rec['target']}) for h, rec in journal['hosts'].items() if rec.get('target'))
    hostvars['gpu-04'] = {'rollout_preflight_failure': {'message': 'nvidia-smi: GPU 7 missing'}}
    return journal, hostvars


def test_a_journal_of_version_2_is_read_and_resumed(tmp_path):
    directory = v2_dir(tmp_path)
    old, hostvars = fixture_hostvars()
    assert old['version'] == 2 and old['status'] == 'running'
    # read: the live journal is the version 2 file, as it is
    assert call(directory, 'gpu-01', 'read')['journal'] == old
    opened = call(directory, 'gpu-01', 'open', hostvars, hosts=sorted(hostvars), max_failed=1)
    assert not opened.get('failed'), opened
    assert opened['resumed'] is True and opened['id'] == '20261206T120000Z'
    assert 'Resuming interrupted rollout 20261206T120000Z (run 2 of it)' in opened['msg']
    journal = whole(directory)
    assert journal['version'] == 3 and len(journal['runs']) == 2
    assert journal['hosts']['gpu-02']['resume'] == 'start'     # stopped, not started: start it, gate it
    assert journal['hosts']['gpu-01']['restarts'] == old['hosts']['gpu-01']['restarts']
    assert journal['hosts']['gpu-04']['phase'] == 'excluded'
    expected = {'failed_hosts': 1, 'failed_units': 1, 'failed_by_phase': {'excluded': 1}, 'replicas': 0}
    assert journal['counters'] == r.budget_counters(journal) == expected
    snapshot = json.loads((directory / 'journal.json').read_text())
    assert snapshot == r.published(journal) and 'counters' not in snapshot
    # the resumed run goes on from the imported records
    assert call(directory, 'gpu-02', 'record', phase='staged').get('failed') is None
    admitted = call(directory, 'gpu-02', 'admit', max_failed=1)
    assert admitted['admitted'] and admitted['resume'] == 'start'


def test_a_snapshot_whose_store_is_gone_is_refused(tmp_path):
    directory = v2_dir(tmp_path)
    _old, hostvars = fixture_hostvars()
    assert not call(directory, 'gpu-01', 'open', hostvars, hosts=sorted(hostvars), max_failed=1).get('failed')
    os.unlink(str(directory / rs.DB_NAME))
    before = (directory / 'journal.json').read_text()
    out = call(directory, 'gpu-01', 'open', hostvars, hosts=sorted(hostvars), max_failed=1)
    msg = ' '.join(out['msg'].split())
    assert out['failed'] and msg.startswith('%s is not a rollout journal (a JSON object): it is the snapshot of rollout '
                                            '20261206T120000Z, still running, whose live journal %s is missing'
                                            % (directory / 'journal.json', directory / rs.DB_NAME)), msg
    assert 'Remedy: move it aside' in msg
    assert (directory / 'journal.json').read_text() == before and not (directory / rs.DB_NAME).exists()
    # a snapshot of a finished rollout is only the last rollout: a new one starts
    closed = dict(json.loads(before), status='completed')
    (directory / 'journal.json').write_text(json.dumps(closed))
    out = call(directory, 'gpu-01', 'open', hostvars, hosts=sorted(hostvars), max_failed=1)
    assert not out.get('failed') and out['resumed'] is False and out['id'] != '20261206T120000Z'


def test_a_store_that_is_not_a_journal_is_refused_and_left_untouched(tmp_path):
    (tmp_path / rs.DB_NAME).write_bytes(b'not a database, at least 100 bytes long ' * 4)
    out = call(tmp_path, 'a', 'open', HOSTVARS, hosts=['a'], max_failed=0)
    msg = ' '.join(out['msg'].split())
    assert out['failed'] and msg.startswith('%s is not a rollout journal this code works on: file is not a database. '
                                            'It was left untouched. Remedy: move it aside' % (tmp_path / rs.DB_NAME)), msg
    assert (tmp_path / rs.DB_NAME).read_bytes() == b'not a database, at least 100 bytes long ' * 4
    # a store of a later layout
    other = tmp_path / 'later'
    assert not call(other, 'a', 'open', HOSTVARS, hosts=['a'], max_failed=0).get('failed')
    conn = sqlite3.connect(str(other / rs.DB_NAME))
    conn.execute('PRAGMA user_version = 99')
    conn.commit()
    conn.close()
    out = call(other, 'a', 'record', phase='staged')
    assert out['failed'] and 'store version 99: this code reads store version 1 or older' in out['msg']


@pytest.mark.parametrize('name', [rs.DB_NAME, rs.DB_NAME + '-journal', rs.DB_NAME + '-wal', rs.DB_NAME + '-shm'])
def test_a_link_planted_as_a_store_file_is_refused_and_its_target_kept(tmp_path, name):
    victim = tmp_path / 'victim'
    victim.write_text('precious\n')
    reports = tmp_path / 'reports'
    reports.mkdir(mode=0o700)
    os.symlink(str(victim), str(reports / name))
    out = call(reports, 'a', 'open', HOSTVARS, hosts=['a'], max_failed=0)
    assert out['failed'] and 'rollout journal: cannot use %s' % (reports / name) in ' '.join(out['msg'].split())
    assert victim.read_text() == 'precious\n'
    assert os.path.islink(str(reports / name))


def test_the_store_files_are_private_and_the_snapshot_is_the_live_journal_at_open_and_close(tmp_path):
    old_umask = os.umask(0o022)
    try:
        assert not call(tmp_path, 'a', 'open', HOSTVARS, hosts=['a', 'b'], max_failed=0).get('failed')
    finally:
        os.umask(old_umask)
    for name in (rs.DB_NAME, rs.DB_NAME + '-journal', rs.SNAPSHOT_NAME):
        assert stat.S_IMODE(os.lstat(str(tmp_path / name)).st_mode) == 0o600, name
    assert json.loads((tmp_path / 'journal.json').read_text()) == call(tmp_path, 'a', 'read')['journal']
    call(tmp_path, 'a', 'record', phase='staged')
    live = call(tmp_path, 'a', 'read')['journal']
    assert live['hosts']['a']['phase'] == 'staged'                                    # read: the live journal
    assert json.loads((tmp_path / 'journal.json').read_text())['hosts']['a']['phase'] == 'pending'   # the snapshot at open
    closed = call(tmp_path, 'a', 'close')
    assert json.loads((tmp_path / 'journal.json').read_text()) == call(tmp_path, 'a', 'read')['journal']
    report = json.loads((tmp_path / os.path.basename(closed['report_json'])).read_text())
    assert report == call(tmp_path, 'a', 'read')['journal'] and 'counters' not in report


def test_the_dump_command_prints_the_live_journal(tmp_path, capsys):
    assert rs.main(['dump', str(tmp_path)]) == 1
    assert not call(tmp_path, 'a', 'open', HOSTVARS, hosts=['a'], max_failed=0).get('failed')
    call(tmp_path, 'a', 'record', phase='staged')
    capsys.readouterr()
    assert rs.main(['dump', str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out) == call(tmp_path, 'a', 'read')['journal']
    assert rs.main(['show']) == 2


def test_each_distinct_entry_is_stored_once(tmp_path):
    hosts = ['h%02d' % i for i in range(20)]
    hostvars = dict(hostvars_of(hosts[:10]), **hostvars_of(hosts[10:], B_ENTRY))
    assert not call(tmp_path, hosts[0], 'open', hostvars, hosts=hosts, max_failed=0).get('failed')
    conn = sqlite3.connect(str(tmp_path / rs.DB_NAME))
    assert conn.execute('SELECT COUNT(*) FROM entries').fetchone() == (2,)
    docs = [json.loads(d) for d, in conn.execute('SELECT doc FROM hosts')]
    assert all('entry' not in d['target'] and d['target']['host'] for d in docs)
    conn.close()
    assert call(tmp_path, 'h00', 'read')['journal']['hosts']['h15']['target'] == contract('h15', B_ENTRY)
