# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The models of bench/rollout_scale.py: pure functions, unit-tested in tests/unit/bench/.

- batch_sizes: the restart batches Ansible makes of a play's ``serial`` list;
- rollout_model: a real rollout's duration from the controller's measured time (gates instant, nothing to
  transfer), the gates and the staging transfer;
- power-law extrapolation of a measured figure to a larger fleet.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import math

# A real Inkling rollout (issue 34; docs/inkling-facts.md): the NVFP4 snapshot is about 592 GB, each host's
# link 25 Gbit/s, a restart and its gate about 10 minutes, the rollout's default serial.
SNAPSHOT_BYTES = 592 * 10 ** 9
LINK_GBIT_S = 25.0
GATE_S = 600.0
DEFAULT_SERIAL = (1, '25%')
TARGET_OVERHEAD = 0.15


def batch_sizes(hosts, serial=DEFAULT_SERIAL):
    """The batch sizes Ansible makes of ``hosts`` hosts with ``serial`` (a list of host counts or percentages of
    all hosts, the last repeated until every host is in a batch; a percentage is truncated, at least 1)."""
    if hosts <= 0:
        return []
    steps = []
    for entry in serial or [hosts]:
        text = str(entry).strip()
        if text.endswith('%'):
            steps.append(int(float(text[:-1]) / 100.0 * hosts) or 1)
        else:
            steps.append(int(text) or hosts)   # serial 0: every host at once
    sizes, left, index = [], hosts, 0
    while left > 0:
        size = min(steps[min(index, len(steps) - 1)], left)
        sizes.append(size)
        left -= size
        index += 1
    return sizes


def transfer_s(snapshot_bytes=SNAPSHOT_BYTES, link_gbit_s=LINK_GBIT_S):
    """Seconds to move one snapshot over one link at line rate."""
    return snapshot_bytes * 8.0 / (link_gbit_s * 1e9)


def rollout_model(hosts, controller_s, serial=DEFAULT_SERIAL, gate_s=GATE_S, snapshot_bytes=SNAPSHOT_BYTES,
                  link_gbit_s=LINK_GBIT_S, target=TARGET_OVERHEAD):
    """A real rollout of ``hosts`` hosts: the controller's own time (``controller_s``: the measured wall time of the
    rollout with instant gates and nothing to transfer), plus one gate per batch, plus the staging transfer (the
    snapshot once at line rate: hub, mirror or peer relay, every host receiving at the same time). The ideal is
    the gates plus the transfer; the target is at most ``target`` above it."""
    batches = batch_sizes(hosts, serial)
    gates = len(batches) * float(gate_s)
    transfer = transfer_s(snapshot_bytes, link_gbit_s)
    ideal = gates + transfer
    total = ideal + float(controller_s)
    return {'hosts': hosts, 'batches': batches, 'gates_s': gates, 'transfer_s': round(transfer, 1),
            'ideal_s': round(ideal, 1), 'controller_s': round(float(controller_s), 1), 'total_s': round(total, 1),
            'ratio': round(total / ideal, 3), 'limit_ratio': 1.0 + target, 'ok': total <= ideal * (1.0 + target)}


def power_fit(points):
    """(coefficient, exponent) of y = c * n ** k through the last two (n, y) points with different n; exponent 1
    (linear through the last point) when there is only one."""
    points = sorted((float(n), float(y)) for n, y in points if n > 0 and y > 0)
    if not points:
        raise ValueError('no point to extrapolate from')
    (n2, y2) = points[-1]
    lower = [p for p in points if p[0] < n2]
    if not lower:
        return y2 / n2, 1.0
    (n1, y1) = lower[-1]
    exponent = math.log(y2 / y1) / math.log(n2 / n1)
    return y2 / n2 ** exponent, exponent


def extrapolate(points, n):
    """y at ``n`` from the power law through the last two measured points."""
    coefficient, exponent = power_fit(points)
    return coefficient * float(n) ** exponent
