# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""plugins/plugin_utils/collection_data.py: the collection's data files, read by the plugins (never a
role's defaults by path), and the analysis_prompts filter that falls back to the shipped golden set."""

import os
import re

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.inkling.fleet.plugins.filter import analysis as analysis_filters
from ansible_collections.inkling.fleet.plugins.plugin_utils import collection_data

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def test_the_deployment_defaults_and_a_fresh_copy_each_time():
    data = collection_data.deployment()
    assert data == {'model': 'thinkingmachines/Inkling-NVFP4', 'tensor_parallel_size': 8}
    data['model'] = 'changed'
    assert collection_data.deployment()['model'] == 'thinkingmachines/Inkling-NVFP4'


def test_the_golden_set_is_the_data_file():
    prompts = collection_data.golden_set()
    assert len(prompts) == 10 and len({p['id'] for p in prompts}) == 10


def test_null_is_the_shipped_golden_set_and_a_whole_set_replaces_it():
    shipped = collection_data.golden_set()
    assert analysis_filters.analysis_prompts(None) == shipped
    extra = [{'id': 'site-capital', 'prompt': 'Capital of France? One word.', 'max_tokens': 8,
              'expect': {'contains': 'paris'}}]
    assert analysis_filters.analysis_prompts(None, extra) == shipped + extra
    assert analysis_filters.analysis_prompts(extra) == extra
    with pytest.raises(AnsibleFilterError):
        analysis_filters.analysis_prompts([{'id': 'bad'}])


def test_no_plugin_opens_a_roles_files_by_path():
    """Issue 38: plugins read collection data (data/) and their arguments, never roles/<name>/... files."""
    found = []
    for top, _dirs, files in os.walk(os.path.join(REPO, 'plugins')):
        for name in files:
            if name.endswith('.py'):
                with open(os.path.join(top, name)) as f:
                    text = f.read()
                if re.search(r"""['"]roles['"]\s*,|['"/]roles/[a-z_]+/(defaults|vars|tasks)""", text):
                    found.append(os.path.relpath(os.path.join(top, name), REPO))
    assert found == []
