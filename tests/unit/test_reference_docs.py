# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""docs/reference/ is what the code says: scripts/reference.py --check renders the modules' DOCUMENTATION
and RETURN, the roles' argument specs and the filters' documentation, and compares."""

import os
import subprocess
import sys

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
SCRIPT = os.path.join(TOP, 'scripts', 'reference.py')


def check():
    env = dict(os.environ)
    return subprocess.run([sys.executable, SCRIPT, '--check'], cwd=TOP, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_the_reference_pages_are_what_the_code_says():
    proc = check()
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_module_role_and_filter_has_its_section():
    pages = {}
    for name in ('modules', 'roles', 'filters'):
        with open(os.path.join(TOP, 'docs', 'reference', name + '.md')) as f:
            pages[name] = f.read()
    for module in os.listdir(os.path.join(TOP, 'plugins', 'modules')):
        if module.endswith('.py') and not module.startswith('_'):
            assert '\n## inkling.fleet.%s\n' % module[:-3] in pages['modules']
    for role in os.listdir(os.path.join(TOP, 'roles')):
        assert '\n## inkling.fleet.%s\n' % role in pages['roles']
    assert '\n## inkling.fleet.replica_of\n' in pages['filters']
    assert '| `table` | dict |' in pages['modules']     # an option row, rendered from DOCUMENTATION
