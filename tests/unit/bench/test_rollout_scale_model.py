# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The models of bench/rollout_scale.py (bench/scale/scale_model.py): batches, a real rollout, extrapolation."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(REPO, 'bench', 'scale'))

import scale_model  # noqa: E402  pylint: disable=wrong-import-position


@pytest.mark.parametrize('hosts, serial, sizes', [
    (1024, [1, '25%'], [1, 256, 256, 256, 255]),
    (16, [1, '25%'], [1, 4, 4, 4, 3]),
    (64, [1, '25%'], [1, 16, 16, 16, 15]),
    (3, [1, '25%'], [1, 1, 1]),           # 25 % of 3 truncates to 0: at least one host a batch
    (10, [2], [2, 2, 2, 2, 2]),
    (5, [0], [5]),                          # serial 0: every host at once
    (0, [1, '25%'], []),
])
def test_batch_sizes_follow_ansible(hosts, serial, sizes):
    assert scale_model.batch_sizes(hosts, serial) == sizes


def test_transfer_of_the_snapshot_at_line_rate():
    # 592 GB at 25 Gbit/s: 592e9 * 8 / 25e9 s
    assert scale_model.transfer_s() == pytest.approx(189.44)
    assert scale_model.transfer_s(10 ** 9, 8.0) == pytest.approx(1.0)


def test_rollout_model_adds_the_controller_to_gates_and_transfer():
    model = scale_model.rollout_model(1024, controller_s=300.0)
    assert model['batches'] == [1, 256, 256, 256, 255]
    assert model['gates_s'] == 5 * 600.0
    assert model['ideal_s'] == pytest.approx(3189.4, abs=0.1)
    assert model['total_s'] == pytest.approx(3489.4, abs=0.1)
    assert model['ratio'] == pytest.approx(3489.44 / 3189.44, abs=1e-3)
    assert model['ok']


def test_rollout_model_fails_past_fifteen_percent():
    ideal = 5 * 600.0 + 189.44
    assert scale_model.rollout_model(1024, controller_s=0.15 * ideal - 1)['ok']
    assert not scale_model.rollout_model(1024, controller_s=0.15 * ideal + 1)['ok']


def test_extrapolation_is_a_line_through_the_two_largest_sizes():
    points = [(4, 100.0), (16, 10.0), (64, 13.0)]      # per host: the line through 16 and 64
    intercept, slope = scale_model.affine_fit(points)
    assert slope == pytest.approx(3.0 / 48)
    assert intercept == pytest.approx(9.0)
    assert scale_model.extrapolate(points, 1024) == pytest.approx(9.0 + 1024 * 3.0 / 48)


def test_a_falling_figure_is_held_flat_and_one_size_is_flat():
    # a per-run cost spread over more hosts: never extrapolated below the largest measurement
    assert scale_model.extrapolate([(16, 20.0), (64, 16.0)], 1024) == pytest.approx(16.0)
    assert scale_model.extrapolate([(16, 8.0)], 64) == pytest.approx(8.0)
    with pytest.raises(ValueError):
        scale_model.affine_fit([])
