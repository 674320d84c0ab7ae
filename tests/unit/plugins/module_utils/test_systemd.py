# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""module_utils/systemd.py: the one deliberate start of a unit (inkling.fleet.unit_run), against a fake
systemctl that keeps a unit's ActiveState and NRestarts as systemd does."""

import pytest

from ansible_collections.inkling.fleet.plugins.module_utils import systemd
from ansible_collections.inkling.fleet.plugins.module_utils.systemd import Systemctl, UnitRun, UnitRunError, plan

UNIT = 'inkling-vllm.service'


class FakeSystemd(object):
    """``states``: the ActiveState each `show` after a start returns in turn (the last one stays)."""

    def __init__(self, active='inactive', nrestarts=3, enabled='disabled', states=('active',), fail=()):
        self.active, self.nrestarts, self.enabled = active, nrestarts, enabled
        self.after_start = list(states)
        self.fail = set(fail)
        self.starting = False
        self.argv = []

    def run(self, argv):
        self.argv.append(argv[1:])
        verb = argv[1]
        if verb in self.fail:
            return 1, '', '%s refused' % verb
        if verb == 'show':
            if self.starting:
                self.active = self.after_start.pop(0) if len(self.after_start) > 1 else self.after_start[0]
            props = {'ActiveState': self.active, 'SubState': 'x', 'NRestarts': str(self.nrestarts), 'Result': 'success'}
            wanted = argv[3].split('=', 1)[1].split(',')
            return 0, ''.join('%s=%s\n' % (k, props[k]) for k in wanted), ''
        if verb == 'is-enabled':
            return (0 if self.enabled == 'enabled' else 1), self.enabled + '\n', ''
        if verb == 'reset-failed':
            self.nrestarts = 0
        elif verb in ('start', 'restart'):
            self.starting = True
        elif verb == 'stop':
            self.active = 'inactive'
        elif verb == 'enable':
            self.enabled = 'enabled'
        return 0, '', ''


def runner(fake, journal=None):
    clock = iter(range(0, 10000, 2))
    return UnitRun('h1', Systemctl(fake.run), journal=journal, sleep=lambda s: None, clock=lambda: next(clock))


def verbs(fake):
    return [a[0] for a in fake.argv]


def test_a_start_resets_the_start_limit_first_and_reads_the_baseline_after_the_reset():
    fake = FakeSystemd(active='inactive', nrestarts=3)
    result = runner(fake).run(UNIT, 'started')
    assert verbs(fake) == ['show', 'reset-failed', 'show', 'start']
    assert result['changed'] and result['action'] == 'start'
    assert result['nrestarts'] == 0 and result['before']['NRestarts'] == '3'


def test_an_active_unit_is_left_alone_and_its_counter_is_the_baseline():
    fake = FakeSystemd(active='active', nrestarts=2)
    result = runner(fake).run(UNIT, 'started', wait_s=60)
    assert verbs(fake) == ['show']
    assert not result['changed'] and result['nrestarts'] == 2


def test_a_restart_resets_and_restarts_an_active_unit_and_a_reload_comes_first():
    fake = FakeSystemd(active='active')
    result = runner(fake).run(UNIT, 'restarted', daemon_reload=True)
    assert verbs(fake) == ['show', 'daemon-reload', 'reset-failed', 'show', 'restart']
    assert result['changed'] and result['commands'][-1]['argv'] == ['systemctl', 'restart', UNIT]


@pytest.mark.parametrize('active,expected', [('active', ['show', 'stop']), ('inactive', ['show']), ('failed', ['show'])])
def test_a_stop_stops_only_a_running_unit_and_resets_nothing(active, expected):
    fake = FakeSystemd(active=active)
    result = runner(fake).run(UNIT, 'stopped')
    assert verbs(fake) == expected
    assert result['changed'] == (active == 'active')


def test_check_mode_only_reads():
    fake = FakeSystemd(active='inactive', enabled='disabled')
    result = runner(fake).run(UNIT, 'started', enabled=True, check_mode=True)
    assert verbs(fake) == ['show', 'is-enabled']
    assert result['changed'] and result['action'] == 'start' and result['enabled']


def test_enable_runs_only_when_the_unit_is_not_enabled():
    fake = FakeSystemd(active='active', enabled='disabled')
    assert runner(fake).run(UNIT, 'started', enabled=True)['changed']
    assert 'enable' in verbs(fake)
    fake = FakeSystemd(active='active', enabled='enabled')
    assert not runner(fake).run(UNIT, 'started', enabled=True)['changed']
    assert 'enable' not in verbs(fake)


def test_the_wait_ends_when_the_unit_is_active():
    fake = FakeSystemd(states=('activating', 'activating', 'active'))
    result = runner(fake).run(UNIT, 'started', wait_s=60)
    assert result['show']['ActiveState'] == 'active'
    assert verbs(fake).count('show') == 2 + 3


def test_a_unit_that_fails_to_start_fails_with_the_host_its_state_and_its_journal():
    fake = FakeSystemd(states=('activating', 'failed'))

    def journal(args):
        return 0, 'line one\nline two\n', ''

    with pytest.raises(UnitRunError) as err:
        runner(fake, journal).run(UNIT, 'restarted', wait_s=60, journal_lines=2)
    msg = str(err.value)
    assert msg.startswith('h1: %s did not become active after restarted (ActiveState=failed' % UNIT)
    assert msg.endswith('Last journal lines: line one | line two')
    assert err.value.result['commands'][-1]['argv'][1] == 'show'


def test_a_unit_still_activating_at_the_deadline_fails():
    fake = FakeSystemd(states=('activating',))
    with pytest.raises(UnitRunError, match='ActiveState=activating'):
        runner(fake).run(UNIT, 'started', wait_s=10)


def test_a_refused_start_fails_with_systemctl_s_message():
    fake = FakeSystemd(fail={'start'})
    with pytest.raises(UnitRunError, match=r'^h1: systemctl start inkling-vllm.service failed \(rc 1\): start refused'):
        runner(fake).run(UNIT, 'started')


def test_a_failed_reset_does_not_stop_the_start():
    fake = FakeSystemd(fail={'reset-failed'})
    assert runner(fake).run(UNIT, 'started')['action'] == 'start'
    assert verbs(fake)[-1] == 'start'


def test_plan_and_parse_show():
    assert plan('started', 'reloading') == {'action': '', 'enable': False}
    assert plan('stopped', 'activating')['action'] == 'stop'
    assert plan('started', 'active', True, 'static')['enable'] is False
    assert systemd.parse_show('ActiveState=active\nNRestarts=1\nnoise\n') == {'ActiveState': 'active', 'NRestarts': '1'}


def test_reset_failed_is_run_in_one_place():
    """Every `systemctl reset-failed` of the collection goes through Systemctl.reset_failed (issue 38): no task
    file, module or other module_utils runs it itself (comments and documentation may name it)."""
    import os
    import re
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    found = []
    for top in ('roles', 'playbooks', 'plugins'):
        for folder, dummy, files in os.walk(os.path.join(repo, top)):
            for name in files:
                if not name.endswith(('.py', '.yml', '.yaml', '.j2')):
                    continue
                path = os.path.join(folder, name)
                with open(path) as fh:
                    for number, line in enumerate(fh, 1):
                        code = line.split('#', 1)[0]
                        # Python: the argument as a string literal; YAML: the word outside a comment
                        pattern = r"""['"]reset-failed['"]""" if name.endswith('.py') else r'reset-failed'
                        if re.search(pattern, code):
                            found.append('%s:%d' % (os.path.relpath(path, repo), number))
    assert found == ['plugins/module_utils/systemd.py:%d' % _line_of("self.call('reset-failed', unit)")]


def _line_of(text):
    with open(systemd.__file__) as fh:
        return next(n for n, line in enumerate(fh, 1) if text in line)
