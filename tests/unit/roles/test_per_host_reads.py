# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Fleet-wide decisions are taken once; no per-host expression reads more than O(1) other hosts (issue 34).

Each ``hostvars[name]`` is a full evaluation of that host's variables (0.55 to 0.8 ms on a real fleet), so an
expression that every host evaluates over every host costs O(N^2) per play: 14 to 16 s per task at 64 hosts, an
hour at 1,024. This test renders, as Ansible renders them, every expression of the roles' task files, defaults,
vars and templates and of the playbooks' tasks that touches ``hostvars``, on a fleet of N hosts whose ``hostvars``
counts its reads: an expression of a ``run_once`` task (or block) once, any other once per host. Every per-host
expression must read a bounded number of hosts (a replica's members at most), every once-per-play expression
O(N), so that the whole play reads O(N) host variables.

A new expression that touches ``hostvars`` needs its variables in ``fleet()`` below: the test names it when it
cannot render it."""

import functools
import glob
import os
import re
import sys
from collections.abc import Mapping

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
A = 'a' * 40
# keys whose values Ansible evaluates as bare expressions
BARE = ('when', 'changed_when', 'failed_when', 'until', 'that')
# a per-host expression may read this many hosts (a replica's members and the host itself); on 64 hosts
PER_HOST = 4
# a once-per-play expression may read each host this many times
PER_PLAY = 2
EXPR = re.compile(r'{{.*?}}', re.S)


def _collection_modules():
    return dict((k, v) for k, v in sys.modules.items() if k == 'ansible_collections' or k.startswith('ansible_collections.'))


@pytest.fixture(scope='module', autouse=True)
def collection_loader():
    """The collection's filters resolve by their FQCN, as in a play: Ansible's collection loader, with the
    collection's modules that other tests imported as a plain package set aside meanwhile."""
    saved = _collection_modules()
    for name in saved:
        del sys.modules[name]
    _AnsibleCollectionFinder(paths=[os.path.join(REPO, 'collections')])._install()
    yield
    _AnsibleCollectionFinder._remove()
    for name in _collection_modules():
        del sys.modules[name]
    sys.modules.update(saved)


class CountingHostvars(Mapping):
    """hostvars: each ``hostvars[name]`` counted (Ansible evaluates all of that host's variables then);
    ``name in hostvars`` asks the inventory only, and is not counted."""

    def __init__(self, data):
        self.data = data
        self.reads = 0

    def __getitem__(self, name):
        self.reads += 1
        return self.data[name]

    def __contains__(self, name):
        return name in self.data

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)


# --- where the expressions are --------------------------------------------------------------------------------

def _strings(obj, key=None):
    if isinstance(obj, str):
        yield key, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _strings(v, k if key is None or k in BARE else key)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v, key)


def _tasks(tasks, where, once=False, scope=None):
    """(where, once, task vars in scope, key, string) of every string of every task that touches hostvars."""
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        run_once = once or task.get('run_once') is True
        local = dict(scope or {}, **(task.get('vars') or {}))
        if 'block' in task:
            for part in ('block', 'rescue', 'always'):
                yield from _tasks(task.get(part), where, run_once, local)
            fields = dict((k, v) for k, v in task.items() if k in ('vars', 'when'))
        else:
            fields = dict((k, v) for k, v in task.items() if k != 'name')
        for key, text in _strings(fields):
            if 'hostvars' in text:
                yield where, run_once, local, key, text


def expressions():
    out = []
    for path in sorted(glob.glob(os.path.join(REPO, 'roles', '*', 'tasks', '*.yml'))):
        with open(path) as f:
            out += _tasks(yaml.safe_load(f), os.path.relpath(path, REPO))
    for path in sorted(glob.glob(os.path.join(REPO, 'playbooks', '*.yml'))):
        with open(path) as f:
            plays = yaml.safe_load(f)
        # a play's hosts and serial are evaluated once for the play; its vars and tasks for each host
        for play in plays:
            out += [(os.path.relpath(path, REPO), False, {}, key, text) for key, text in _strings(play.get('vars') or {})
                    if 'hostvars' in text]
            for part in ('pre_tasks', 'tasks', 'post_tasks', 'handlers'):
                out += _tasks(play.get(part), os.path.relpath(path, REPO))
    # role defaults and vars: evaluated for each host
    for path in sorted(glob.glob(os.path.join(REPO, 'roles', '*', 'defaults', '**', '*.yml'), recursive=True)
                       + glob.glob(os.path.join(REPO, 'roles', '*', 'vars', '*.yml'))):
        with open(path) as f:
            out += [(os.path.relpath(path, REPO), False, {}, key, text) for key, text in _strings(yaml.safe_load(f) or {})
                    if 'hostvars' in text]
    # templates: rendered for each host
    for path in sorted(glob.glob(os.path.join(REPO, 'roles', '*', 'templates', '*'))):
        with open(path) as f:
            out += [(os.path.relpath(path, REPO), False, {}, 'template', m) for m in EXPR.findall(f.read()) if 'hostvars' in m]
    return out


# --- a fleet ------------------------------------------------------------------------------------------------------

def fleet(n):
    """(hostvars data, variables of each host): n hosts taking part in everything, in replicas of two."""
    names = ['gpu-%04d' % i for i in range(n)]
    replica = {}
    for i in range(0, n - 1, 2):
        members = names[i:i + 2]
        for m in members:
            replica[m] = {'name': 'r%d' % i, 'members': members, 'head': members[0], 'head_address': members[0],
                          'port': 29550}
    shared = {
        'ansible_play_hosts': names, 'ansible_play_hosts_all': names, 'ansible_play_batch': names,
        'groups': {'all': names}, 'ansible_check_mode': False,
        # hf_cache peer staging
        'hf_cache_peer_hosts': names, 'hf_cache_peer_seeds': 1, '__hf_cache_seeds': names[:1],
        '__hf_cache_hub_files': {'revision': A},
        '__hf_cache_fanout': {'peers': names, 'seeds': names[:1], 'roots': names[:1], 'receivers': names[1:],
                              'holders': [], 'commit': A, 'run': 'r', 'allow': [],
                              'addresses': dict((h, '10.0.0.1') for h in names)},
        # preflight
        'inkling_variant_overrides': {}, '__preflight_layers': [],
        # rollout
        'rollout_serial': [1, '25%'], 'rollout_canary_per_variant': True,
    }
    host_facts = {}
    for i, name in enumerate(names):
        host_facts[name] = dict(shared, **{
            'inventory_hostname': name, 'ansible_host': '10.0.%d.%d' % (i // 250, i % 250),
            'hf_cache_peer_state': {'run': 'r', 'holder': False, 'held_revision': '', 'address': '10.0.0.%d' % i},
            '__hf_cache_plan': {'revision': A},
            'inkling_replica': replica.get(name, {}).get('name', ''),
            'preflight_replica': replica.get(name),
            '__preflight_gpu_info': {'nvidia_gpu': {'driver_version': '580.95.05'}},
            '__preflight_variant': {'variant': {'model': {'repo_id': 'org/m', 'revision': A}}},
            'rollout_deployment': {'variant': 'v', 'entry': {'replica': replica.get(name)} if name in replica else {}},
            '__rollout_restart': {'replica': replica.get(name) or {}, 'reasons': ['unit changed'], 'before': {},
                                  'after': {}},
            '__rollout_cache_seed': {'key': {'id': 'k'}, 'url': 'u', 'files': []} if i == 0 else {},
            '__rollout_at_stop': True, '__rollout_gate': {'failed': False},
            '__rollout_member_state': {'stdout': 'ActiveState=active\nNRestarts=0'}, '__rollout_start': {'nrestarts': 0},
            '__hardware_validation_result': {'host': name},
        })
    return names, host_facts


def render(text, key, host_vars, local):
    hostvars = CountingHostvars(host_vars['__all__'])
    variables = dict((k, trust_as_template(v) if isinstance(v, str) else v) for k, v in local.items())
    variables.update(host_vars['__self__'])
    variables['hostvars'] = hostvars
    if key in BARE and '{{' not in text:
        text = '{{ %s }}' % text
    Templar(loader=DataLoader(), variables=variables).template(trust_as_template(text))
    return hostvars.reads


@functools.lru_cache(maxsize=None)
def reads(n):
    """{(where, expression): (once, hosts read by the evaluations of one play)}."""
    names, facts = fleet(n)
    out = {}
    for where, once, local, key, text in expressions():
        total = 0
        for name in names[:1] if once else names:
            try:
                total += render(text, key, {'__all__': facts, '__self__': facts[name]}, local)
            except Exception as e:  # pylint: disable=broad-except
                pytest.fail('%s: cannot render %r for %s (give fleet() what it needs): %s' % (where, text, name, e))
        out[(where, text.strip())] = (once, total)
    return out


def test_the_fleet_wide_decisions_are_found():
    found = dict(((w, t), once) for (w, t), (once, dummy) in reads(4).items())
    places = set(w for w, t in found)
    for where in ('roles/hf_cache/tasks/stage_peer.yml', 'roles/hf_cache/tasks/peer_wait.yml',
                  'roles/rollout/tasks/restart_phases.yml', 'roles/preflight/tasks/main.yml'):
        assert where in places, sorted(places)
    # each of them is taken once for the play (or the batch), on the controller
    for (where, text), once in found.items():
        if 'inkling.fleet.hf_peer_' in text or 'cache_seed' in text or 'replica_table' in text:
            assert once, (where, text)


@pytest.mark.parametrize('n', [64])
def test_no_per_host_expression_reads_more_than_a_few_hosts(n):
    for (where, text), (once, total) in sorted(reads(n).items()):
        if once:
            assert total <= PER_PLAY * n + PER_HOST, '%s: %r (once) read %d hosts of %d' % (where, text, total, n)
        else:
            assert total <= PER_HOST * n, '%s: %r read %.1f hosts per host of %d' % (where, text, float(total) / n, n)


def test_the_whole_play_reads_o_n_host_variables():
    small, large = [sum(t for dummy, t in reads(n).values()) for n in (16, 64)]
    # linear: four times the hosts, about four times the reads (O(N^2) would be sixteen times)
    assert large <= 4.5 * small, (small, large)
