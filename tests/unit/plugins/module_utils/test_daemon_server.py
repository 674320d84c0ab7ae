# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The daemons shipped to the hosts (cache_seed_server, hf_peer_relay) share module_utils/daemon_server.py; the
file shipped (daemon_server.script_source) holds its code and runs alone, with the standard library only."""

import subprocess
import sys
import types

import pytest

from ansible_collections.inkling.fleet.plugins.module_utils import cache_seed_server
from ansible_collections.inkling.fleet.plugins.module_utils import daemon_server
from ansible_collections.inkling.fleet.plugins.module_utils import hf_peer_relay


@pytest.mark.parametrize('module', [cache_seed_server, hf_peer_relay])
def test_the_shipped_script_runs_alone(module, tmp_path):
    script = tmp_path / 'daemon.py'
    script.write_text(daemon_server.script_source(module))
    text = script.read_text()
    assert 'ansible_collections' not in text and 'def threading_server(' in text
    # -I: neither the collection, the script's folder nor the user's site-packages on sys.path
    proc = subprocess.run([sys.executable, '-I', str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          cwd=str(tmp_path), check=False)
    assert proc.returncode == 2 and b'usage: ' in proc.stderr, proc.stderr


def test_a_script_without_the_markers_or_with_a_clashing_name_is_refused(tmp_path):
    plain = types.ModuleType('plain')
    plain.__file__ = str(tmp_path / 'plain.py')
    (tmp_path / 'plain.py').write_text('import sys\n')
    sys.modules['plain'] = plain
    try:
        with pytest.raises(ValueError, match='no'):
            daemon_server.script_source(plain)
        (tmp_path / 'plain.py').write_text('import sys\n%s\nimport daemon_server\n%s\n\n\ndef read_fleet_config(path):\n'
                                           '    return path\n' % (daemon_server.BEGIN, daemon_server.END))
        with pytest.raises(ValueError, match='read_fleet_config'):
            daemon_server.script_source(plain)
    finally:
        del sys.modules['plain']
