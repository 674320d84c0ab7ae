# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""No plugin names a role's private (``__<role>_``) fact (docs/architecture.md, "Fleet-wide decisions"):
a plugin reads what a role publishes and documents, or takes values as arguments."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
ROLES = sorted(os.listdir(os.path.join(TOP, 'roles')))
PRIVATE = re.compile(r'\b__(%s)_[a-z0-9_]+' % '|'.join(re.escape(r) for r in ROLES))


def plugin_files():
    for top, dirs, files in os.walk(os.path.join(TOP, 'plugins')):
        dirs[:] = [d for d in dirs if d != '__pycache__']
        for name in files:
            if name.endswith('.py'):
                yield os.path.join(top, name)


def test_the_pattern_knows_every_role_and_catches_a_private_name():
    assert {'preflight', 'hf_cache', 'image', 'service', 'rollout'} <= set(ROLES)
    assert PRIVATE.search("failure_var=dict(default='__rollout_preflight_failure')")
    assert not PRIVATE.search("default='rollout_preflight_failure'")


def test_no_plugin_names_a_private_fact():
    found = []
    for path in plugin_files():
        with open(path) as handle:
            for number, line in enumerate(handle, 1):
                match = PRIVATE.search(line)
                if match:
                    found.append('%s:%d: %s' % (os.path.relpath(path, TOP), number, match.group(0)))
    assert not found, 'plugins naming a role-private fact (publish a documented fact instead):\n' + '\n'.join(found)
