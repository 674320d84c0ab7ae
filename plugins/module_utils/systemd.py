# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""systemctl as the collection's modules call it, and the one deliberate start of a service unit.

- ``Systemctl`` runs ``systemctl`` and keeps each command it ran (argv, rc, stderr) for the result.
  ``reset_failed`` is the one place that clears a unit's failed state: a deliberate start must not use
  up ``StartLimitBurst``, which is there to stop a crash loop (systemd.unit(5)), and it also sets the
  service's restart counter ``NRestarts`` back to 0 (systemctl(1)).
- ``UnitRun.run`` starts, restarts or stops a unit on purpose: the start limit is reset right before a
  start, the restart counter is read after the reset (a gate's baseline: any restart above it is a
  crash), the unit is started, and then, when asked, systemd is polled until the unit is active or has
  failed; a unit that did not become active fails with its last journal lines.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import time

ACTIVE_STATES = ('active', 'reloading')

# The options of inkling.fleet.unit_run (its DOCUMENTATION describes them).
UNIT_RUN_ARGUMENT_SPEC = dict(
    host=dict(type='str', required=True),
    unit=dict(type='str', required=True),
    state=dict(type='str', default='started', choices=['started', 'restarted', 'stopped']),
    enabled=dict(type='bool'),
    daemon_reload=dict(type='bool', default=False),
    wait_s=dict(type='int', default=0),
    journal_lines=dict(type='int', default=40),
)
SHOW = 'ActiveState,SubState,NRestarts,Result'


class UnitRunError(Exception):
    def __init__(self, message, result):
        super(UnitRunError, self).__init__(message)
        self.result = result


def parse_show(text):
    """``systemctl show --property=A,B`` output (``A=x`` lines) as a dict."""
    props = {}
    for line in (text or '').splitlines():
        key, sep, value = line.partition('=')
        if sep:
            props[key.strip()] = value.strip()
    return props


def plan(state, active_state, enabled=None, is_enabled=''):
    """What a deliberate ``state`` does to a unit whose ``ActiveState`` is ``active_state``: a dict of
    ``action`` (``start``, ``restart``, ``stop`` or ``''``: nothing) and ``enable`` (whether
    ``systemctl enable`` runs). Pure."""
    active = active_state in ACTIVE_STATES
    if state == 'restarted':
        action = 'restart'
    elif state == 'started':
        action = '' if active else 'start'
    else:
        action = 'stop' if active or active_state in ('activating', 'deactivating') else ''
    return {'action': action, 'enable': bool(enabled) and is_enabled not in ('enabled', 'static', 'generated')}


class Systemctl(object):
    """``run(argv)`` returns (rc, stdout, stderr): AnsibleModule.run_command in a module."""

    def __init__(self, run, binary='systemctl'):
        self.run = run
        self.binary = binary
        self.commands = []

    def call(self, *args):
        rc, out, err = self.run([self.binary] + list(args))
        self.commands.append({'argv': ['systemctl'] + list(args), 'rc': rc, 'stderr': (err or '').strip()})
        return rc, out or '', (err or '').strip()

    def reset_failed(self, unit):
        """Clear the unit's failed state, start limit and restart counter. Best effort: an unknown unit
        (a first deployment's, removed) has nothing to reset, so the rc is returned, not raised."""
        return self.call('reset-failed', unit)[0]

    def show(self, unit, properties=SHOW):
        return parse_show(self.call('show', unit, '--property=' + properties)[1])


class UnitRun(object):
    """One deliberate start, restart or stop of a unit (see the module docstring)."""

    def __init__(self, host, systemctl, journal=None, sleep=time.sleep, clock=time.monotonic):
        self.host = host
        self.systemctl = systemctl
        self.journal = journal
        self.sleep = sleep
        self.clock = clock

    @classmethod
    def for_module(cls, module):
        """The UnitRun of a module run: its host option, systemctl and journalctl through run_command."""
        journalctl = module.get_bin_path('journalctl')
        return cls(module.params['host'], Systemctl(module.run_command, module.get_bin_path('systemctl', required=True)),
                   journal=(lambda args: module.run_command([journalctl] + args)) if journalctl else None)

    def run(self, unit, state, enabled=None, daemon_reload=False, wait_s=0, poll_s=2, journal_lines=40,
            check_mode=False):
        sc = self.systemctl
        before = sc.show(unit)
        is_enabled = sc.call('is-enabled', unit)[1].strip() if enabled else ''
        what = plan(state, before.get('ActiveState', ''), enabled, is_enabled)
        result = {'changed': bool(what['action'] or what['enable']), 'action': what['action'],
                  'enabled': what['enable'], 'before': before, 'nrestarts': _int(before.get('NRestarts')),
                  'show': before, 'commands': sc.commands}
        if check_mode:
            return result
        if daemon_reload:
            self._must(result, 'daemon-reload')
        if what['enable']:
            self._must(result, 'enable', unit)
        if what['action'] in ('start', 'restart'):
            sc.reset_failed(unit)
            result['nrestarts'] = _int(sc.show(unit, 'NRestarts').get('NRestarts'))
        if what['action']:
            self._must(result, what['action'], unit)
        if what['action'] in ('start', 'restart') and wait_s > 0:
            result['show'] = self._wait(unit, wait_s, poll_s)
            if result['show'].get('ActiveState') not in ACTIVE_STATES:
                raise UnitRunError('%s: %s did not become active after %s (%s). Last journal lines: %s' % (
                    self.host, unit, state, ', '.join('%s=%s' % kv for kv in sorted(result['show'].items())),
                    ' | '.join(self._journal(unit, journal_lines)) or '(none)'), result)
        return result

    def _must(self, result, *args):
        rc, dummy, err = self.systemctl.call(*args)
        if rc != 0:
            raise UnitRunError('%s: systemctl %s failed (rc %s): %s' % (self.host, ' '.join(args), rc, err or 'no message'),
                               result)

    def _wait(self, unit, wait_s, poll_s):
        deadline = self.clock() + wait_s
        while True:
            props = self.systemctl.show(unit)
            if props.get('ActiveState') in ACTIVE_STATES + ('failed',) or self.clock() >= deadline:
                return props
            self.sleep(poll_s)

    def _journal(self, unit, lines):
        if not self.journal:
            return []
        rc, out, dummy = self.journal(['--no-pager', '-n', str(lines), '-u', unit])
        return (out or '').splitlines()[-lines:] if rc == 0 else []


def exit_or_fail(module, call, errors, keep=None):
    """The end of a module run: exit_json with what ``call()`` returns, or, on one of ``errors``,
    fail_json with its message and what it says ran (its ``result``, or only its ``keep`` keys;
    ``commands`` at least)."""
    try:
        result = call()
    except errors as exc:
        partial = getattr(exc, 'result', None) or {}
        partial = dict((k, v) for k, v in partial.items() if keep is None or k in keep)
        module.fail_json(msg=str(exc), **dict({'commands': []}, **partial))
    module.exit_json(**result)


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
