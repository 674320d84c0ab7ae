# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The versions the collection states agree: galaxy.yml, the changelog, every plugin's
version_added and every role's min_ansible_version (meta/runtime.yml)."""

import ast
import glob
import os

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load(path):
    with open(os.path.join(REPO, path)) as f:
        return yaml.safe_load(f)


def _key(version):
    return tuple(int(p) for p in version.split('.'))


def _plugin_versions():
    """(plugin name, version_added) of every module and filter."""
    found = []
    for path in sorted(glob.glob(os.path.join(REPO, 'plugins', 'modules', '*.py'))):
        with open(path) as f:
            tree = ast.parse(f.read())
        doc = [n.value.value for n in tree.body if isinstance(n, ast.Assign)
               and any(getattr(t, 'id', '') == 'DOCUMENTATION' for t in n.targets)]
        found.append((os.path.basename(path)[:-3], str(yaml.safe_load(doc[0]).get('version_added'))))
    for path in sorted(glob.glob(os.path.join(REPO, 'plugins', 'filter', '*.yml'))):
        found.append((os.path.basename(path)[:-4], str(_load(path)['DOCUMENTATION'].get('version_added'))))
    return found


def test_every_version_added_is_released_or_the_next_release():
    version = str(_load('galaxy.yml')['version'])
    released = set(_load('changelogs/changelog.yaml')['releases'])
    fragments = [f for f in os.listdir(os.path.join(REPO, 'changelogs', 'fragments')) if f.endswith('.yml')]
    if fragments:  # unreleased changes: galaxy.yml names the release they go into
        assert version not in released, 'galaxy.yml %s is released, yet %d fragments are not' % (version, len(fragments))
        assert all(_key(version) > _key(r) for r in released)
    allowed = released | {version}
    wrong = [(name, added) for name, added in _plugin_versions() if added not in allowed]
    assert not wrong, 'version_added not in %s: %s' % (sorted(allowed), wrong)


def test_the_first_release_s_modules_say_so():
    first = _load('changelogs/changelog.yaml')['releases']['0.1.0']
    names = {m['name'] for m in first.get('modules', [])}
    added = dict(_plugin_versions())
    assert {n for n in names if added.get(n) != '0.1.0'} == set()
    assert {n for n, v in added.items() if v == '0.1.0' and n not in names
            and os.path.exists(os.path.join(REPO, 'plugins', 'modules', n + '.py'))} == set()


def test_roles_require_the_ansible_core_the_collection_requires():
    floor = _load('meta/runtime.yml')['requires_ansible'].split(',')[0].lstrip('>=')
    for meta in sorted(glob.glob(os.path.join(REPO, 'roles', '*', 'meta', 'main.yml'))):
        with open(meta) as f:
            got = str(yaml.safe_load(f)['galaxy_info']['min_ansible_version'])
        assert got == floor, '%s: min_ansible_version %s, meta/runtime.yml requires %s' % (meta, got, floor)


def test_galaxy_names_the_containers_podman_modules_the_roles_use():
    """galaxy.yml's comment lists the dependency's modules; it must name exactly those the roles call."""
    import re
    used = set()
    for path in glob.glob(os.path.join(REPO, 'roles', '*', 'tasks', '*.yml')):
        with open(path) as f:
            used |= set(re.findall(r'containers\.podman\.(podman_[a-z_]+)', f.read()))
    with open(os.path.join(REPO, 'galaxy.yml')) as f:
        comment = re.search(r'# The roles use containers\.podman \(([^)]*)\)', f.read()).group(1)
    assert set(n.strip() for n in comment.replace('\n#', ' ').split(',')) == used
