# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The hf_cache role's peer path (roles/hf_cache/tasks/stage_peer.yml and the files it imports), read as the
sequence of tasks the linear strategy runs: every task waits for every host, so on a fleet each task that runs
a module on every host costs seconds. The seeds' hub download and the receivers' copies must start in two
consecutive tasks, after the daemons started, so that the relay runs while the seeds download (issue 19: with
the daemons, the addresses and the jobs in between, the seed's download ended before the first receiver
started); and the tasks that run a module on every host before the copies start stay few."""

import os

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TASKS = os.path.join(REPO, 'roles', 'hf_cache', 'tasks')
# run on the controller or only decide: no module on the hosts
LOCAL = ('ansible.builtin.set_fact', 'ansible.builtin.assert', 'ansible.builtin.debug', 'ansible.builtin.fail',
         'inkling.fleet.hf_hub_files')


def flat(name):
    """The tasks of a task file with import_tasks and blocks (and their always) inlined, in order;
    an include_tasks stays one entry (it is a task of its own)."""
    with open(os.path.join(TASKS, name)) as f:
        tasks = yaml.safe_load(f)
    out = []
    for task in tasks:
        if 'ansible.builtin.import_tasks' in task:
            out += flat(task['ansible.builtin.import_tasks'])
        elif 'block' in task:
            out += [t for part in ('block', 'rescue', 'always') for t in flat_list(task.get(part) or [])]
        else:
            out.append(task)
    return out


def flat_list(tasks):
    out = []
    for task in tasks:
        if 'ansible.builtin.import_tasks' in task:
            out += flat(task['ansible.builtin.import_tasks'])
        elif 'block' in task:
            out += flat_list(task['block'])
        else:
            out.append(task)
    return out


def module(task):
    return next(k for k in task if '.' in k and k not in ('ansible.builtin.import_tasks',))


def test_the_seeds_download_and_the_receivers_copies_start_in_consecutive_tasks_after_the_daemons():
    mods = [module(t) for t in flat('stage_peer.yml')]
    start, copy = mods.index('inkling.fleet.hf_download'), mods.index('inkling.fleet.hf_peer_copy')
    assert copy == start + 1, mods
    assert mods.index('inkling.fleet.hf_peer_serve') < start, mods
    # the seeds' plan (their hub contact) comes before the daemons, not between the download and the copies
    assert mods.index('ansible.builtin.include_tasks') < mods.index('inkling.fleet.hf_peer_serve'), mods


def test_few_tasks_run_a_module_on_the_hosts_before_the_copies_start():
    tasks = flat('stage_peer.yml')
    mods = [module(t) for t in tasks]
    before = [m for m in mods[:mods.index('inkling.fleet.hf_peer_copy')] if m not in LOCAL]
    # the seeds' plan (an include), the daemon (with the reset of a killed run's leftovers), the seeds' download
    # start; no fact gathering: the address comes from check.yml's module run
    assert before == ['ansible.builtin.include_tasks', 'inkling.fleet.hf_peer_serve',
                      'inkling.fleet.hf_download'], before


def test_one_module_run_checks_the_held_snapshot_creates_the_cache_dir_and_finds_the_address():
    tasks = flat('check.yml')
    on_hosts = [t for t in tasks if module(t) not in LOCAL]
    assert [module(t) for t in on_hosts] == ['inkling.fleet.hf_snapshot'], tasks
    check = on_hosts[0]
    args = check['inkling.fleet.hf_snapshot']
    assert args['local_only'] is True and set(args['create_cache_dir']) == {'owner', 'group', 'mode'}
    assert args['report_address'] == "{{ hf_cache_source == 'peer' }}"
    assert 'changed_when' not in check  # a created directory or a changed mode shows as changed
    with open(os.path.join(TASKS, 'stage_peer.yml')) as f:
        text = f.read()
    assert "ansible_default_ipv4.address | default(__hf_cache_local.address" in text


def test_the_daemons_are_stopped_and_a_killed_runs_leftovers_ended_on_every_host():
    with open(os.path.join(TASKS, 'stage_peer.yml')) as f:
        block = [t for t in yaml.safe_load(f) if 'block' in t][0]
    stop = block['always']
    assert [module(t) for t in stop] == ['inkling.fleet.hf_peer_reset'] and 'when' not in stop[0], stop
