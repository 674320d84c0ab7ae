# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Action plugin inkling.fleet.hf_hub_files: the commit of a revision and its file list, fetched on the controller.

Documentation: plugins/modules/hf_hub_files.py. The decisions (what the answer must hold, the patterns) are
``hf_fanout.hub_commit`` and ``hub_files``; this file only asks the hub."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json

from ansible.module_utils.urls import open_url
from ansible_collections.inkling.fleet.plugins.module_utils import hf_fanout
from ansible_collections.inkling.fleet.plugins.plugin_utils.action import InklingAction

ARGUMENT_SPEC = {
    'endpoint': {'type': 'str', 'required': True},
    'repo_id': {'type': 'str', 'required': True},
    'revision': {'type': 'str', 'required': True},
    'token': {'type': 'str', 'no_log': True, 'default': ''},
    'allow_patterns': {'type': 'list', 'elements': 'str', 'default': []},
    'ignore_patterns': {'type': 'list', 'elements': 'str', 'default': []},
    'timeout_s': {'type': 'int', 'default': 60},
}


class ActionModule(InklingAction):
    _requires_connection = False
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run_action(self, result, args, task_vars):
        url = '%s/api/models/%s/revision/%s?blobs=true' % (
            args['endpoint'].rstrip('/'), args['repo_id'], args['revision'])
        headers = {'Authorization': 'Bearer %s' % args['token']} if args['token'] else {}
        try:
            resp = open_url(url, headers=headers, timeout=args['timeout_s'], http_agent='inkling.fleet hf_hub_files')
            info = json.loads(resp.read())
        except Exception as exc:  # pylint: disable=broad-except
            msg = str(exc).replace(args['token'], '********') if args['token'] else str(exc)
            result.update(failed=True, msg='the controller cannot read the file list of %s@%s from %s: %s: %s. Remedy: '
                                           'set hf_cache_peer_files_endpoint to the hub (or mirror) as the '
                                           'controller reaches it, and check hf_cache_token.'
                          % (args['repo_id'], args['revision'][:12], args['endpoint'], type(exc).__name__, msg))
            return result
        # a branch or tag is the commit the hub names now, asked here: never a peer's report (issue 36, finding 6)
        commit, error = hf_fanout.hub_commit(info, args['revision'])
        files = None
        if not error:
            files, error = hf_fanout.hub_files(info, commit, args['allow_patterns'], args['ignore_patterns'])
        if error:
            result.update(failed=True, msg='the hub\'s file list of %s@%s from %s is not usable: %s'
                          % (args['repo_id'], args['revision'][:12], args['endpoint'], error))
            return result
        result.update(changed=False, files=files, revision=commit, files_total=len(files),
                      bytes_total=sum(f['size'] for f in files),
                      msg='%d files, %d bytes of %s@%s, from %s' % (
                          len(files), sum(f['size'] for f in files), args['repo_id'], commit[:12],
                          args['endpoint']))
        return result
