# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Hosts that preflight sets aside do not crash the later plays: the real rollout playbook, on
hosts without a GPU (so every host fails preflight), still stages nothing, closes the journal
and writes its report, each host with preflight's own reason (issue: set-aside hosts)."""

import json
import os

import jsonschema

from test_rollout_validate_play import run


def test_every_host_set_aside_still_gets_a_report_with_preflight_s_reason(tmp_path):
    report_dir = tmp_path / 'reports'
    proc, out = run(tmp_path, '-e', 'preflight_fail_host=false', '-e', 'rollout_max_failed_hosts=5',
                    '-e', 'rollout_min_healthy_hosts=0', '-e', 'rollout_report_dir=%s' % report_dir,
                    env_extra={'ANSIBLE_SHOW_CUSTOM_STATS': '1'})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # the stage and restart entry points do not ask a set-aside host for its contract
    assert 'Validation of arguments failed' not in out
    assert 'PLAY [Rollout | journal and report]' in proc.stdout
    # the restart plan, printed in play 1 (a preview prints it too): 3 hosts, serial [1, "25%"]
    assert 'Restart plan: 3 batch(es) of 1, 1, 1 host(s)' in out
    journal = json.loads((report_dir / 'journal.json').read_text())
    assert journal['status'] != 'running'
    hosts = journal['hosts']
    assert sorted(hosts) == ['gpu-01', 'gpu-02', 'gpu-03']
    for name, host in hosts.items():
        assert host['phase'] == 'excluded', (name, host)
        assert 'nvidia-smi' in host['message'], (name, host)
    report = (report_dir / ('rollout-%s.md' % journal['id'])).read_text()
    for name in hosts:
        assert '| %s | set aside by preflight, not touched |' % name in report
    assert os.path.exists(report_dir / ('rollout-%s.json' % journal['id']))
    # what the playbook wrote follows the published schema (docs/report-schema.json)
    with open(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'docs', 'report-schema.json')) as f:
        schema = json.load(f)
    jsonschema.validate(journal, schema)
    jsonschema.validate(json.loads((report_dir / ('rollout-%s.json' % journal['id'])).read_text()), schema)
    # the job's artefacts (set_stats), as AWX keeps them
    assert 'CUSTOM STATS' in proc.stdout and 'inkling_rollout' in proc.stdout
    assert str(report_dir / ('rollout-%s.json' % journal['id'])) in out
