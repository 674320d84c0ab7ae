# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The rollout's Markdown report (roles/rollout/templates/report.md.j2), rendered by
Ansible's own templating from journals shaped like the ones the rollout writes."""

import os
import re

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TEMPLATE = os.path.join(REPO, 'roles', 'rollout', 'templates', 'report.md.j2')
T0 = 1796000000.0


def render(journal):
    with open(TEMPLATE) as f:
        source = f.read()
    return Templar(loader=DataLoader(), variables={'__rollout_journal': journal}).template(trust_as_template(source))


def journal(hosts, **extra):
    data = {'id': '20261130T000000Z', 'status': 'completed', 'started': '2026-11-30T00:00:00Z',
            'finished': '2026-11-30T00:02:00Z', 'hosts': hosts}
    data.update(extra)
    return data


def chart(text):
    """The lines of the text chart, by host."""
    block = text.split('```text\n', 1)[1].split('```', 1)[0]
    rows = {}
    for line in block.splitlines():
        m = re.match(r'^(\S+)\s+\|(.*)\|$', line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def test_two_hosts_in_sequence_get_bars_where_they_were_down():
    text = render(journal({
        'h-a': {'restarted': True, 'ready': True, 't_stop': T0, 't_ready': T0 + 30, 'unavailable_s': 30.0},
        'h-b': {'restarted': True, 'ready': True, 't_stop': T0 + 30, 't_ready': T0 + 60, 'unavailable_s': 30.0},
        'h-c': {'restarted': False, 'ready': True},
    }))
    rows = chart(text)
    assert set(rows) == {'h-a', 'h-b'}  # a host that was not restarted has no bar
    assert len(rows['h-a']) == len(rows['h-b']) == 60
    assert rows['h-a'] == '#' * 30 + ' ' * 30
    assert rows['h-b'] == ' ' * 30 + '#' * 30
    assert '| h-a | 0.0 | 30.0 | 30.0 |' in text
    assert '| h-b | 30.0 | 60.0 | 30.0 |' in text
    assert 'The axis spans 60.0 s.' in text
    mermaid = text.split('```mermaid\n', 1)[1].split('```', 1)[0]
    assert 'dateFormat X' in mermaid
    assert '    section h-a\n    down 30.0 s :active, %d, %d' % (T0, T0 + 30) in mermaid
    assert 'section h-c' not in mermaid


def test_failed_and_rolled_back_host_is_marked_failed():
    text = render(journal({
        'h-a': {'restarted': True, 'ready': True, 'failed': True, 'rolled_back': True, 'message': 'gate failed',
                't_stop': T0, 't_ready': T0 + 10, 'unavailable_s': 10.0},
    }, status='halted', halted=True, halt_reason='1 host(s) failed (h-a), over the fleet-wide budget of 0'))
    assert '- **Halted:** 1 host(s) failed (h-a), over the fleet-wide budget of 0' in text
    assert '| h-a | - | - | - | - | True | True | True | 10.0 | gate failed |' in text
    assert 'down 10.0 s (failed) :crit, %d, %d' % (T0, T0 + 10) in text
    assert chart(text)['h-a'] == '#' * 60


def test_host_not_back_runs_to_the_end_of_the_chart():
    text = render(journal({
        'h-a': {'restarted': True, 'ready': True, 't_stop': T0, 't_ready': T0 + 5, 'unavailable_s': 5.0},
        'h-b': {'restarted': True, 'ready': False, 'failed': True, 'unit_removed': True, 't_stop': T0 + 5,
                'message': 'first deployment on this host (no previous unit): the new unit was stopped and removed'},
    }, status='completed with failures', failed_hosts=['h-b']))
    rows = chart(text)
    assert rows['h-b'].rstrip().endswith('x')
    assert rows['h-b'].lstrip(' ').strip('x') == ''
    assert '| h-b | ' in text and '| not back | - |' in text
    assert 'down - not back (failed) :crit' in text


def test_no_restart_says_so():
    text = render(journal({'h-a': {'restarted': False, 'ready': True}}))
    assert 'No host was restarted.' in text
    assert '```text' not in text


@pytest.mark.parametrize('pipe_message', ['a | b\nc'])
def test_message_cannot_break_the_table(pipe_message):
    text = render(journal({'h-a': {'restarted': False, 'ready': True, 'message': pipe_message}}))
    assert '| a / b c |' in text
