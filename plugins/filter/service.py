# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters of the service role: its input checks (plugins/module_utils/service.py)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.inkling.fleet.plugins.module_utils import service as svc


def service_input_problems(variant, host='', image='', revision='', served_model_name='', port=0, listen='',
                           timeout_start_s=0, engine_ready_timeout_s=0, drain_timeout_s=0, stop_timeout_s=0,
                           timeout_stop_s=0, shutdown_timeout_flag='', api_key_set=False, allow_no_api_key=False):
    """What is wrong with the service role's inputs, one message per problem; empty when nothing is."""
    return svc.input_problems(variant, host=host, image=image, revision=revision, served_model_name=served_model_name,
                              port=port, listen=listen, timeout_start_s=timeout_start_s,
                              engine_ready_timeout_s=engine_ready_timeout_s, drain_timeout_s=drain_timeout_s,
                              stop_timeout_s=stop_timeout_s, timeout_stop_s=timeout_stop_s,
                              shutdown_timeout_flag=shutdown_timeout_flag, api_key_set=bool(api_key_set),
                              allow_no_api_key=bool(allow_no_api_key))


class FilterModule(object):
    def filters(self):
        return {'service_input_problems': service_input_problems}
