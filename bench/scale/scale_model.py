# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The models of bench/rollout_scale.py: pure functions, unit-tested in tests/unit/bench/.

- batch_sizes: the restart batches Ansible makes of a play's ``serial`` list;
- rollout_model: a real rollout's duration from the controller's measured time (gates instant, nothing to
  transfer), the gates and the staging transfer;
- the extrapolation of a per-host or per-call figure to a larger fleet (a line in the fleet size).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


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


def affine_fit(points):
    """(intercept, slope) of y = a + b * n through the two largest sizes of (n, y) points, the slope at least 0;
    (y, 0) with one size. Per-host and per-call costs of a rollout are of this form: a constant per task, plus
    what grows with the fleet (the journal read and written whole, expressions over every host's variables).
    A per-run cost spread over the hosts makes a per-host figure fall with n; the slope is then taken as 0."""
    by_size = {}
    for n, y in points:
        if n > 0 and y is not None:
            by_size[float(n)] = float(y)
    if not by_size:
        raise ValueError('no point to extrapolate from')
    sizes = sorted(by_size)
    n2 = sizes[-1]
    if len(sizes) == 1:
        return by_size[n2], 0.0
    n1 = sizes[-2]
    slope = max(0.0, (by_size[n2] - by_size[n1]) / (n2 - n1))
    return by_size[n2] - slope * n2, slope


def extrapolate(points, n):
    """y at ``n`` on the line through the two largest measured sizes (see affine_fit)."""
    intercept, slope = affine_fit(points)
    return intercept + slope * float(n)
